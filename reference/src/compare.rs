//! The project's one error measure: the relative Frobenius error against an f64
//! reference, `||x - ref|| / ||ref||`.
//!
//! Infinite entries (the LSE `-inf` of a row with no key) must agree exactly and are
//! left out of the sums; a disagreement makes the error NaN, which fails every bound.
//! When the reference is all zero the measure is `||x||`, so garbage is still caught.

/// `||x - r|| / ||r||` over paired values; see the module docs.
pub fn rel_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (&a, &b) in x.into_iter().zip(r) {
        if a.is_infinite() || b.is_infinite() {
            if a != b {
                return f64::NAN;
            }
            continue;
        }
        num += (a - b) * (a - b);
        den += b * b;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

#[cfg(test)]
mod tests {
    use super::rel_err;

    #[test]
    fn measures_relative_distance() {
        assert_eq!(rel_err(&[3.0, 4.0], &[0.0, 0.0]), 5.0);
        assert!((rel_err(&[1.0, 1.0], &[1.0, 2.0]) - 1.0 / 5f64.sqrt()).abs() < 1e-15);
        assert_eq!(rel_err(&[f64::NEG_INFINITY, 1.0], &[f64::NEG_INFINITY, 1.0]), 0.0);
        assert!(rel_err(&[f64::NEG_INFINITY], &[0.0]).is_nan());
        assert!(rel_err(&[f64::NAN], &[1.0]).is_nan());
    }
}
