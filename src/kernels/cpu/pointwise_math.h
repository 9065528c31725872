/* The float formulas of erf, tanh and exp shared by the portable loops
 * (pointwise_math.c) and the AVX-512 ones (pointwise_math_avx512.c), so both
 * evaluate the same polynomials:
 *   exp(x) = 2^k * p(r), k = round(x log2 e), r = x - k ln 2 (two-part ln 2),
 *            p the degree-6 Taylor polynomial (|r| <= ln2/2: ~2e-8 relative);
 *   erf(x) = x P(x^2) / Q(x^2), x clamped to [-4, 4] (Eigen's fast float
 *            erf, a rational minimax: within 3.3e-7 of erf everywhere, 2.5e-7
 *            below |x| = 1; one branch, one division: the fused GELU spends
 *            most of its time here);
 *   tanh(x) = x * P(x^2) for |x| < 0.55 (Taylor to x^15: ~5e-8), else
 *            1 - 2 / (exp(2|x|) + 1), with the sign of x. */
#ifndef KILN_KERNELS_CPU_POINTWISE_MATH_H
#define KILN_KERNELS_CPU_POINTWISE_MATH_H

#define KILN_EXP_HI 88.3762626647949f
#define KILN_EXP_LO -87.3365478515625f
#define KILN_LOG2E 1.44269504088896341f
#define KILN_LN2_HI 0.693359375f
#define KILN_LN2_LO -2.12194440e-4f
#define KILN_EXP_P {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}
#define KILN_EXP_NP 7

#define KILN_ERF_CLAMP 4.0f /* erf(4) is 1 - 1.5e-8: 1 in float */
#define KILN_ERF_P {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f, -5.69250639462346e-05f, \
    -7.34990630326855e-04f, -2.95459980854025e-03f, -1.60960333262415e-02f}
#define KILN_ERF_NP 7
#define KILN_ERF_Q {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f, -7.37332916720468e-03f, \
    -1.42647390514189e-02f}
#define KILN_ERF_NQ 5
#define KILN_TWO_OVER_SQRTPI 1.1283791670955126f

#define KILN_TANH_SMALL 0.55f
#define KILN_TANH_SMALL_P {-0.0014558343870513183f, 0.003592128036572481f, -0.008863235529902197f, \
    0.021869488536155203f, -0.05396825396825397f, 0.13333333333333333f, -0.3333333333333333f, 1.0f}
#define KILN_TANH_SMALL_NP 8
#define KILN_TANH_CLAMP 9.0f /* tanh(9) rounds to 1 */

#endif
