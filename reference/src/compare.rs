//! The project's error measures, against an f64 reference, in one place: the CLI's
//! `verify`, the proofs, the GPU checks and the examples all compare through these.
//!
//! * [`rel_err`]: the relative Frobenius error `||x - r|| / ||r||`, or `||x - r||` when
//!   the reference is all zero (so garbage against zeros is still caught);
//! * [`floor_err`]: `||x - r|| / max(||r||, floor)`, for gradients, which can be zero up
//!   to rounding (cancellation), where a pure relative error divides noise by noise;
//! * [`pointwise_err`]: the largest `|x_i - r_i| / (1 + |r_i|)`, relative for large
//!   values and absolute near zero: the measure for log-sum-exps, which cross zero;
//! * [`worst`]: the largest of several errors, NaN if any is NaN.
//!
//! # Non-finite values
//! Every measure applies one rule to each pair `(x_i, r_i)`:
//! * a NaN on either side makes the error NaN, which passes no bound (`err <= bound` and
//!   `err < bound` are false for NaN);
//! * equal infinities (same sign, e.g. the `-inf` log-sum-exp of a row with no key on
//!   both sides) agree exactly and are left out of the sums;
//! * any other pair with an infinity (an infinity against a finite value or against the
//!   opposite infinity) makes the error `+inf`;
//! * NaN wins over `+inf`, whatever the order of the pairs.
//!
//! `f64::max` ignores NaN (`x.max(NaN) == x`), so errors must be combined with [`worst`],
//! never with `max`, or a NaN would pass.
//!
//! The two sides are paired in order and must have the same length (a mismatch is a bug
//! of the caller and panics).

/// Sums of squares over the finite pairs, `(sum (x - r)^2, sum r^2)`, or the error the
/// non-finite pairs impose (module docs).
fn squares<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>) -> Result<(f64, f64), f64> {
    let (mut diff, mut norm) = (0.0, 0.0);
    let verdict = scan(x, r, |a, b| {
        diff += (a - b) * (a - b);
        norm += b * b;
    });
    verdict.map(|()| (diff, norm))
}

/// Feed every finite pair to `finite`; `Err` with NaN or `+inf` when the non-finite
/// pairs decide the error (module docs).
fn scan<'a>(
    x: impl IntoIterator<Item = &'a f64>,
    r: impl IntoIterator<Item = &'a f64>,
    mut finite: impl FnMut(f64, f64),
) -> Result<(), f64> {
    let (mut x, mut r) = (x.into_iter(), r.into_iter());
    let (mut nan, mut unmatched) = (false, false);
    loop {
        match (x.next(), r.next()) {
            (Some(&a), Some(&b)) => {
                if a.is_nan() || b.is_nan() {
                    nan = true;
                } else if a.is_infinite() || b.is_infinite() {
                    unmatched |= a != b;
                } else {
                    finite(a, b);
                }
            }
            (None, None) => break,
            _ => panic!("compared sequences differ in length"),
        }
    }
    match (nan, unmatched) {
        (true, _) => Err(f64::NAN),
        (false, true) => Err(f64::INFINITY),
        (false, false) => Ok(()),
    }
}

/// `||x - r|| / ||r||` over paired values, `||x - r||` when `||r|| = 0`; see the module
/// docs for NaN and infinities.
pub fn rel_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>) -> f64 {
    match squares(x, r) {
        Ok((diff, 0.0)) => diff.sqrt(),
        Ok((diff, norm)) => diff.sqrt() / norm.sqrt(),
        Err(e) => e,
    }
}

/// `||x - r|| / max(||r||, floor)` over paired values: [`rel_err`] while `||r||` is at
/// least `floor`, an absolute error scaled by `1 / floor` below it (gradients that
/// cancel to zero; pick `floor` as the norm of a non-degenerate result, e.g.
/// `rms * sqrt(len)`). Same rule for NaN and infinities (module docs).
pub fn floor_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>, floor: f64) -> f64 {
    match squares(x, r) {
        Ok((diff, norm)) => diff.sqrt() / norm.sqrt().max(floor),
        Err(e) => e,
    }
}

/// The largest `|x_i - r_i| / (1 + |r_i|)` over paired values (0 for none): relative
/// where `|r_i| >> 1`, absolute near zero, so a log-sum-exp that crosses zero is judged
/// evenly. Same rule for NaN and infinities (module docs).
pub fn pointwise_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>) -> f64 {
    let mut largest = 0.0_f64;
    match scan(x, r, |a, b| largest = largest.max((a - b).abs() / (1.0 + b.abs()))) {
        Ok(()) => largest,
        Err(e) => e,
    }
}

/// The largest of `errors` (0 for none), NaN if any is NaN: the way to combine errors,
/// since `f64::max` drops NaN.
pub fn worst(errors: impl IntoIterator<Item = f64>) -> f64 {
    errors.into_iter().fold(0.0, |w, e| if w.is_nan() || e.is_nan() { f64::NAN } else { w.max(e) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;
    const NAN: f64 = f64::NAN;

    /// `sqrt(sum (x - r)^2)` and `sqrt(sum r^2)` written out for small cases.
    #[test]
    fn relative_error_is_the_frobenius_ratio() {
        assert_eq!(rel_err(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
        assert!((rel_err(&[1.0, 2.0, 3.3], &[1.0, 2.0, 3.0]) - 0.3 / 14f64.sqrt()).abs() < 1e-15);
        assert!((rel_err(&[1.0, 1.0], &[1.0, 2.0]) - 1.0 / 5f64.sqrt()).abs() < 1e-15);
        // An all-zero reference: the absolute error, so garbage still shows.
        assert_eq!(rel_err(&[3.0, 4.0], &[0.0, 0.0]), 5.0);
        assert_eq!(rel_err(&[], &[]), 0.0);
    }

    #[test]
    fn nan_never_passes() {
        for (x, r) in [([1.0, NAN], [1.0, 2.0]), ([1.0, 2.0], [NAN, 2.0]), ([NAN, -INF], [1.0, 2.0])] {
            assert!(rel_err(&x, &r).is_nan(), "{x:?} {r:?}");
            assert!(floor_err(&x, &r, 1.0).is_nan(), "{x:?} {r:?}");
            assert!(pointwise_err(&x, &r).is_nan(), "{x:?} {r:?}");
        }
        // NaN wins over an unmatched infinity in either order.
        assert!(rel_err(&[INF, NAN], &[1.0, 1.0]).is_nan());
        assert!(rel_err(&[NAN, INF], &[1.0, 1.0]).is_nan());
    }

    /// Equal infinities (the `-inf` LSE of an empty row on both sides) are equal and
    /// left out; the finite entries alone make the error.
    #[test]
    fn equal_infinities_agree_and_are_left_out() {
        let (x, r) = ([-INF, 1.0, INF, 2.0], [-INF, 1.0, INF, 2.2]);
        let finite = rel_err(&[1.0, 2.0], &[1.0, 2.2]);
        assert!(finite > 0.0);
        assert_eq!(rel_err(&x, &r), finite);
        assert_eq!(floor_err(&x, &r, 0.5), finite);
        assert!((pointwise_err(&x, &r) - 0.2 / 3.2).abs() < 1e-15);
        assert_eq!(rel_err(&[-INF], &[-INF]), 0.0);
    }

    #[test]
    fn an_unmatched_infinity_is_an_infinite_error() {
        for (x, r) in [([-INF, 1.0], [0.0, 1.0]), ([0.0, 1.0], [-INF, 1.0]), ([INF, 1.0], [-INF, 1.0])] {
            assert_eq!(rel_err(&x, &r), INF, "{x:?} {r:?}");
            assert_eq!(floor_err(&x, &r, 1.0), INF, "{x:?} {r:?}");
            assert_eq!(pointwise_err(&x, &r), INF, "{x:?} {r:?}");
        }
    }

    /// Above the floor the floored error is the relative error itself; below it, the
    /// absolute error over the floor.
    #[test]
    fn floor_error_is_relative_above_the_floor_and_absolute_below() {
        let (x, r) = ([0.505, -0.4, 0.3, 0.2], [0.5, -0.4, 0.3, 0.2]);
        assert_eq!(floor_err(&x, &r, 1e-2), rel_err(&x, &r));
        let (noise, zero) = ([1e-6, -1e-6, 1e-6, 0.0], [1e-17, -1e-17, 0.0, 0.0]);
        let absolute = (3.0f64 * 1e-12).sqrt();
        assert!((floor_err(&noise, &zero, 1e-2) / (absolute / 1e-2) - 1.0).abs() < 1e-9);
        assert!(rel_err(&noise, &zero) > 1e9, "a pure relative error divides noise by noise");
    }

    #[test]
    fn pointwise_error_is_relative_for_large_values_and_absolute_near_zero() {
        assert_eq!(pointwise_err(&[101.0, 0.0], &[99.0, 0.0]), 2.0 / 100.0);
        assert_eq!(pointwise_err(&[0.0, 0.5], &[0.0, 0.0]), 0.5);
        assert_eq!(pointwise_err(&[], &[]), 0.0);
    }

    #[test]
    fn worst_keeps_nan_where_max_would_drop_it() {
        assert_eq!(worst([1e-3, 2e-3, 0.0]), 2e-3);
        assert_eq!(worst([1e-3, INF]), INF);
        assert!(worst([1e-3, NAN, 2e-3]).is_nan());
        assert!(worst([NAN, 1e-3]).is_nan());
        assert_eq!(1e-3f64.max(NAN), 1e-3, "the pitfall `worst` avoids");
        assert_eq!(worst([]), 0.0);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn sequences_of_different_lengths_are_a_bug() {
        rel_err(&[1.0, 2.0], &[1.0]);
    }
}
