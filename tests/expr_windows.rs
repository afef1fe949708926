//! Masks read as sliding windows (`ExprPattern::as_window`: what the GPU runs as its
//! built-in window, `GpuPattern::lowered`) against the window's key sets, from the
//! reference's window pattern: random conjunctions of affine comparisons, and random
//! masks of any shape from `expr_gen.rs` (recognition must be sound on every one).
//!
//! Key sets compared exactly.

mod expr_gen;

use expr_gen::{bool_e, constants, print};
use proptest::prelude::*;
use ringdil_proofs::{config, pattern_counts};
use ringdil_reference::pattern::expr::Env;
use ringdil_reference::pattern::{ExprPattern, SlidingWindow};

/// Shapes: n 1..=24, heads 1..=3 (the other entries are unused here).
fn shape() -> impl Strategy<Value = [usize; 4]> {
    (1..=24usize, 1..=3usize).prop_map(|(n, h)| [1, n, h, 1])
}

proptest! {
    #![proptest_config(config(256))]

    /// A mask that `ExprPattern::as_window` reads as a window `(left, right)` (what
    /// the GPU then runs as its built-in window) has that window's key sets: conjunctions
    /// of random comparisons between affine forms `a q + b k + c` (windows whenever every
    /// form has `b = -a`, with or without `abs`), and random masks of any shape (sound
    /// when recognised).
    #[test]
    fn masks_read_as_windows_are_those_windows(
        [_, n, heads, _] in shape(),
        forms in prop::collection::vec((-3i64..=3, prop::bool::ANY, -9i64..=9, 0usize..6, prop::bool::ANY), 1..=3),
        random in bool_e(3, false),
    ) {
        const OPS: [&str; 6] = ["<=", "<", ">=", ">", "==", "!="];
        let affine = |a: i64, paired: bool, c: i64| {
            let b = if paired { -a } else { a + 1 };
            format!("{a} * q + {b} * k + {c}")
        };
        let parts: Vec<String> = forms
            .iter()
            .map(|&(a, paired, c, op, abs)| match abs {
                true => format!("abs({}) {} {}", affine(a, paired, 0), ["<=", "<"][op % 2], c.abs()),
                false => format!("{} {} {}", affine(a, paired, c), OPS[op], -c),
            })
            .collect();
        for text in [parts.join(" && "), print(&random, false)] {
            let Ok(p) = ExprPattern::new(&text, &constants()) else { continue };
            if let Some((left, right)) = p.as_window() {
                let window = SlidingWindow { left: left.min(n), right: right.min(n) };
                prop_assert_eq!(pattern_counts(&p, heads, n), pattern_counts(&window, heads, n), "{}", text);
            }
        }
        // Paired forms compared by <=, <, >=, > or == without abs, where d = q - k = 0 passes, are windows.
        let paired = forms.iter().all(|&(a, paired, _, op, abs)| paired && a != 0 && !abs && op < 5);
        let p = ExprPattern::new(&parts.join(" && "), &constants()).expect("affine comparisons parse");
        let holds_at_zero = p.mask().eval(&Env::default()) != 0;
        if paired && holds_at_zero {
            prop_assert!(p.as_window().is_some(), "{} is a window", parts.join(" && "));
        }
    }

}
