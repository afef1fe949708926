//! The scaling goals of issue 25, per row: with `ratio = t_1(N) / (P t_P(N))`,
//! * forward + backward `>= 0.90` at 16K tokens per GPU and more (dense causal, grouped-
//!   query and packed rows);
//! * forward `>= 0.85` at 8K tokens per GPU;
//! * LongNet `>= 0.85` (forward and forward + backward).

use crate::configs::{K, LONGNET};
use serde::Serialize;

/// The goal a row is held to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Goal {
    pub text: &'static str,
    /// Which ratios must reach `min`.
    pub fwd: bool,
    pub fwd_bwd: bool,
    pub min: f64,
}

/// The goal of a row of `pattern` at `per_gpu` tokens per GPU.
pub fn goal(pattern: &str, per_gpu: usize) -> Goal {
    if pattern == LONGNET {
        Goal { text: "LongNet fwd, fwd+bwd >= 0.85", fwd: true, fwd_bwd: true, min: 0.85 }
    } else if per_gpu >= 16 * K {
        Goal { text: "fwd+bwd >= 0.90", fwd: false, fwd_bwd: true, min: 0.90 }
    } else {
        Goal { text: "fwd >= 0.85", fwd: true, fwd_bwd: false, min: 0.85 }
    }
}

impl Goal {
    /// Whether the ratios meet the goal (a missing ratio does not).
    pub fn met(&self, ratio_fwd: f64, ratio_fwd_bwd: f64) -> bool {
        (!self.fwd || ratio_fwd >= self.min) && (!self.fwd_bwd || ratio_fwd_bwd >= self.min)
    }

    /// The ratio the goal is judged on (the smaller of the two it names).
    pub fn judged(&self, ratio_fwd: f64, ratio_fwd_bwd: f64) -> f64 {
        match (self.fwd, self.fwd_bwd) {
            (true, true) => ratio_fwd.min(ratio_fwd_bwd),
            (true, false) => ratio_fwd,
            _ => ratio_fwd_bwd,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_follow_the_issue() {
        assert!(goal("dense causal", 16 * K).met(0.5, 0.9));
        assert!(!goal("dense causal", 64 * K).met(1.0, 0.89));
        assert!(goal("dense causal", 8 * K).met(0.85, 0.1));
        assert!(!goal(LONGNET, 64 * K).met(0.9, 0.84));
        assert!(!goal("dense causal", 16 * K).met(1.0, f64::NAN));
        assert_eq!(goal(LONGNET, 16 * K).judged(0.9, 0.86), 0.86);
    }
}
