// exp over a float vector, written once for every vector ISA. Like the
// *_simd_body.h files, included inside an ISA translation unit's anonymous
// namespace after its primitives (kernels/simd_avx2.h, kernels/simd_avx512.h:
// set1, min, max, mul, add, fmadd, fnmadd, round_nearest, times_pow2).
//
// e^x as activation_ops.h's exp_f32 computes it: x = k ln2 + r with |r| <= ln2/2,
// e^r by Cephes' expf polynomial (~2 ulp), then the exact scaling by 2^k.
// The clamp keeps a NaN (max/min return their second operand when one is
// NaN); outside [-104, 89] the result is 0 or inf anyway.
static inline __attribute__((always_inline)) Vec exp_lanes(Vec x) {
  x = min(set1(89.0f), max(set1(-104.0f), x));
  const Vec k = round_nearest(mul(x, set1(1.44269504088896341f)));
  // ln2 = 0.693359375 - 2.12194440e-4, the first part exact in 9 bits.
  Vec r = fnmadd(k, set1(0.693359375f), x);
  r = fnmadd(k, set1(-2.12194440e-4f), r);
  Vec p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  p = fmadd(p, mul(r, r), r);
  return times_pow2(add(p, set1(1.0f)), k);
}
