/* The float formulas of erf, tanh and exp shared by the portable loops
 * (pointwise_math.c) and the AVX-512 ones (pointwise_math_avx512.c), so both
 * evaluate the same polynomials:
 *   exp(x) = 2^k * p(r), k = round(x log2 e), r = x - k ln 2 (two-part ln 2),
 *            p the degree-6 Taylor polynomial (|r| <= ln2/2: ~2e-8 relative);
 *   erf(x) = x * P(x^2) for |x| < 1 (Taylor to x^19: ~2e-8), else
 *            1 - t*Q(t) exp(-x^2), t = 1/(1 + 0.3275911 |x|) (Abramowitz and
 *            Stegun 7.1.26, the formula PyTorch's vectorised erf uses: 1.5e-7 absolute);
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

#define KILN_ERF_SMALL_P {-1.6365844691234924e-07f, 1.6462114365889246e-06f, -1.492565035840625e-05f, \
    0.00012055332981789664f, -0.0008548327023450852f, 0.005223977625442188f, -0.026866170645131252f, \
    0.11283791670955126f, -0.37612638903183754f, 1.1283791670955126f}
#define KILN_ERF_SMALL_NP 10
#define KILN_ERF_AS_P 0.3275911f
#define KILN_ERF_AS_Q {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}
#define KILN_ERF_AS_NQ 5
#define KILN_ERF_CLAMP 10.0f /* erf is 1 in float well before */
#define KILN_TWO_OVER_SQRTPI 1.1283791670955126f

#define KILN_TANH_SMALL 0.55f
#define KILN_TANH_SMALL_P {-0.0014558343870513183f, 0.003592128036572481f, -0.008863235529902197f, \
    0.021869488536155203f, -0.05396825396825397f, 0.13333333333333333f, -0.3333333333333333f, 1.0f}
#define KILN_TANH_SMALL_NP 8
#define KILN_TANH_CLAMP 9.0f /* tanh(9) rounds to 1 */

#endif
