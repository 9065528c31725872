/* The float formulas of erf, tanh and exp shared by the portable loops
 * (pointwise_math.c) and the AVX-512 ones (pointwise_math_avx512.c), so both
 * evaluate the same polynomials:
 *   exp(x) = 2^k * p(r), k = round(x log2 e), r = x - k ln 2 (two-part ln 2),
 *            p the degree-6 Taylor polynomial (|r| <= ln2/2: ~2e-8 relative);
 *   erf(x) = sign(x) min(1, p_i(t)), u = min(8|x|, 31.5^-), i = round(u),
 *            t = u - i in [-1/2, 1/2]: 32 pieces of width 1/8, each a degree-4
 *            minimax polynomial (p_0(0) = 0, so small x keep their relative
 *            accuracy) but the last, p_31 = 1 (erf is within 7e-8 of 1
 *            there): within 7e-8 of erf everywhere (1.2 float ulps near
 *            1), exactly 1 beyond. No division, and the AVX-512 loop fetches the
 *            coefficients with two-register permutes (the shuffle unit), so
 *            it costs 4 FMAs where the rational minimax it replaced (Eigen's)
 *            cost 10, 4 multiplies and a reciprocal: the fused GELU spends most of its time here.
 *            Fitted by Lawson-weighted least squares on Chebyshev nodes;
 *            tests/test_kernels.c checks the bound;
 *   tanh(x) = x * P(x^2) for |x| < 0.55 (Taylor to x^15: ~5e-8), else
 *            1 - 2 / (exp(2|x|) + 1), with the sign of x.
 * CPUs with AVX2 but not AVX-512 (pointwise_math_avx2.c) take erf in 4
 * pieces of width 1 (u = min(|x|, 4), i = min(round(u), 3), t = u - i,
 * the last piece reaching x = 4, the first through 0 with p_0(0) = 0), each
 * a degree-9 polynomial fitted coefficient by coefficient in float
 * (scripts/fit_erf_avx2.py): four pieces fit one 128-bit lane, so an
 * in-lane permute (vpermilps, two a cycle on Zen 3) fetches each
 * coefficient where the 8-piece form it replaced took a lane-crossing one
 * (vpermps, one a cycle): 0.49 ns an element against 0.82. Within 6e-8 of
 * erf (the same 7e-8 bound, 1.5e-7 relative near 0); its bits differ from the
 * 32-piece formula's. */
#ifndef KILN_KERNELS_CPU_POINTWISE_MATH_H
#define KILN_KERNELS_CPU_POINTWISE_MATH_H

#define KILN_EXP_HI 88.3762626647949f
#define KILN_EXP_LO -87.3365478515625f
#define KILN_LOG2E 1.44269504088896341f
#define KILN_LN2_HI 0.693359375f
#define KILN_LN2_LO -2.12194440e-4f
#define KILN_EXP_P {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}
#define KILN_EXP_NP 7

#define KILN_ERF_PIECES 32      /* per unit of |x|: 8 */
#define KILN_ERF_UMAX 31.499998f /* the float below 31.5: u rounds to at most piece 31 */
#define KILN_ERF_ROUND 12582912.0f /* 1.5 * 2^23: u + this has round(u) in its low mantissa bits */
#define KILN_ERF_NP 5            /* coefficients per piece, constant term first */
/* KILN_ERF_TAB[k][i]: the coefficient of t^k in piece i */
#define KILN_ERF_TAB { \
    {0.0f, 0.140316203f, 0.276326388f, 0.404116899f, 0.520499885f, 0.623240888f, 0.711155653f, 0.784075081f, \
     0.842700779f, 0.888388216f, 0.92290014f, 0.948170066f, 0.966105163f, 0.978443742f, 0.986671686f, 0.99199003f, \
     0.995322287f, 0.997345984f, 0.998537302f, 0.999217033f, 0.999593019f, 0.999794602f, 0.999899387f, 0.999952137f, \
     0.999977887f, 0.999990106f, 0.999995708f, 0.999998212f, 0.999999285f, 0.999999702f, 0.999999881f, 1.0f}, \
    {0.141047388f, 0.138860598f, 0.132501721f, 0.122544073f, 0.109847821f, 0.0954374596f, 0.0803664178f, 0.0655931681f, \
     0.0518884771f, 0.0397842824f, 0.0295651685f, 0.0212949906f, 0.0148662953f, 0.0100590335f, 0.00659687072f, 0.00419322168f, \
     0.00258336542f, 0.0015425951f, 0.000892783515f, 0.000500804745f, 0.000272281875f, 0.00014348187f, 7.32830085e-05f, 3.62775136e-05f, \
     1.74060242e-05f, 8.09449102e-06f, 3.6484405e-06f, 1.59386968e-06f, 6.74879232e-07f, 2.76966347e-07f, 1.10168024e-07f, 0.0f}, \
    {2.90700825e-07f, -0.00216969335f, -0.00414067227f, -0.0057442449f, -0.00686547952f, -0.00745604234f, -0.00753434328f, -0.00717424648f, \
     -0.00648605544f, -0.00559466239f, -0.00461955741f, -0.00366007746f, -0.0027874324f, -0.00204324373f, -0.00144306803f, -0.000982788741f, \
     -0.000645843393f, -0.000409753469f, -0.000251096586f, -0.000148677282f, -8.50886863e-05f, -4.70803789e-05f, -2.51912788e-05f, -1.30373774e-05f, \
     -6.52734388e-06f, -3.16195724e-06f, -1.48220408e-06f, -6.72426665e-07f, -2.95266034e-07f, -1.25503433e-07f, -5.16426724e-08f, 0.0f}, \
    {-0.000736379006f, -0.000699639029f, -0.000603086432f, -0.000458309194f, -0.000285992573f, -0.000108994813f, 5.18148809e-05f, 0.000180851159f, \
     0.000269593089f, 0.000316705293f, 0.000326768553f, 0.00030818017f, 0.000270858087f, 0.000224277639f, 0.000176151356f, 0.000131829991f, \
     9.43101695e-05f, 6.46452681e-05f, 4.25323778e-05f, 2.68971526e-05f, 1.63671284e-05f, 9.591864e-06f, 5.41769032e-06f, 2.95099994e-06f, \
     1.55092175e-06f, 7.86801252e-07f, 3.85439989e-07f, 1.82391901e-07f, 8.33937932e-08f, 3.68509632e-08f, 1.57414899e-08f, 0.0f}, \
    {4.1875137e-06f, 1.67364215e-05f, 3.09336283e-05f, 4.05862593e-05f, 4.46142403e-05f, 4.30121072e-05f, 3.67439898e-05f, 2.74232498e-05f, \
     1.68984243e-05f, 6.85529585e-06f, -1.46826017e-06f, -7.40949054e-06f, -1.08561635e-05f, -1.21144603e-05f, -1.17287464e-05f, -1.03104912e-05f, \
     -8.40863777e-06f, -6.43877729e-06f, -4.66386791e-06f, -3.21154312e-06f, -2.10974031e-06f, -1.32559853e-06f, -7.98204667e-07f, -4.61317939e-07f, \
     -2.56212843e-07f, -1.36882306e-07f, -7.04037504e-08f, -3.4885435e-08f, -1.66627103e-08f, -7.67564234e-09f, -3.41145356e-09f, 0.0f} \
}
/* KILN_ERF4_TAB[k][i]: the coefficient of t^k in piece i (AVX2) */
#define KILN_ERF4_NP 10
#define KILN_ERF4_TAB { \
    {0.000000000e+00f, 8.427007794e-01f, 9.953222871e-01f, 9.999778867e-01f}, \
    {1.128379226e+00f, 4.151074886e-01f, 2.066698484e-02f, 1.392530394e-04f}, \
    {-3.779035296e-06f, -4.151060879e-01f, -4.133668169e-02f, -4.163311387e-04f}, \
    {-3.760431707e-01f, 1.383694857e-01f, 4.822296277e-02f, 7.884738734e-04f}, \
    {-8.853333420e-04f, 6.916311383e-02f, -3.439247981e-02f, -1.058201073e-03f}, \
    {1.180390194e-01f, -6.918748468e-02f, 1.308987755e-02f, 1.028411440e-03f}, \
    {-1.774797030e-02f, 4.676823504e-03f, 1.404961513e-04f, -7.019237382e-04f}, \
    {8.052946068e-03f, 1.515963674e-02f, -3.390528960e-03f, 3.442298039e-04f}, \
    {-3.646627814e-02f, -4.487331025e-03f, 2.134214621e-03f, -1.390018006e-04f}, \
    {2.051333152e-02f, -1.854192698e-03f, 9.124469216e-06f, 3.720972381e-05f} \
}
#define KILN_TWO_OVER_SQRTPI 1.1283791670955126f

#define KILN_TANH_SMALL 0.55f
#define KILN_TANH_SMALL_P {-0.0014558343870513183f, 0.003592128036572481f, -0.008863235529902197f, \
    0.021869488536155203f, -0.05396825396825397f, 0.13333333333333333f, -0.3333333333333333f, 1.0f}
#define KILN_TANH_SMALL_NP 8
#define KILN_TANH_CLAMP 9.0f /* tanh(9) rounds to 1 */

#endif
