//! The measured choice of a schedule ([`DistRank::tune`]): run each candidate's forward
//! on the rank's real inputs and keep the fastest, as cuDNN's benchmark mode does for
//! convolution algorithms.
//!
//! Why next to the rule of [`crate::dist::auto`]: the rule predicts from a few machine
//! speeds and cannot see every fixed cost (a step's launches per branch and piece pair,
//! a Ulysses rank's gathers and scatters), so near a crossover it can pick an option a
//! few percent, or for LongNet 20%, slower than the best. A training loop calls attention
//! with the same shapes for thousands of steps; timing the candidates once costs a few
//! forwards and then always runs the fastest. The rule stays the cold-start answer.
//!
//! How: for each candidate, one warm-up forward (it also builds the schedule's state:
//! Ulysses' index lists), then `reps` forwards, each between barriers (so the wall time
//! is the slowest rank's); rank 0's medians are broadcast and every rank picks the
//! fastest of the same numbers ([`fastest`]: the first listed wins a tie), so all ranks
//! run the same schedule.

use super::DistRank;
use super::data::RankData;
use crate::dist::error::{DistError, DistResult};
use ringdil_reference::ring::Kind;
use serde::Serialize;
use std::time::Instant;

/// A tuning result: the chosen schedule and the median forward time of every candidate
/// (rank 0's, shared with every rank).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tuned {
    pub schedule: Kind,
    pub forward_s: Vec<(Kind, f64)>,
}

/// The candidate with the smallest finite time, the first listed on a tie (`None`: no
/// finite time).
pub fn fastest(times: &[(Kind, f64)]) -> Option<Kind> {
    let mut best: Option<(Kind, f64)> = None;
    for &(k, t) in times {
        if t.is_finite() && best.is_none_or(|(_, b)| t < b) {
            best = Some((k, t));
        }
    }
    best.map(|b| b.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl DistRank<'_> {
    /// Time the forward of each of `candidates` on `data` (`reps` passes after a warm-up)
    /// and pick the fastest (module docs). Collective: every rank calls it with the same
    /// candidates and `reps`.
    pub fn tune(&mut self, data: &RankData, candidates: &[Kind], reps: usize) -> DistResult<Tuned> {
        if candidates.is_empty() || reps == 0 {
            return Err(DistError::BadTune { candidates: candidates.len(), reps });
        }
        let mut mine = Vec::with_capacity(candidates.len());
        for &kind in candidates {
            let mut ts = Vec::with_capacity(reps);
            for i in 0..=reps {
                self.comm.barrier(self.gpu)?;
                let t = Instant::now();
                let out = self.forward(kind, data)?;
                self.gpu.synchronize()?;
                self.comm.stream().synchronize()?;
                drop(out);
                self.comm.barrier(self.gpu)?;
                if i > 0 {
                    ts.push(t.elapsed().as_secs_f64());
                }
            }
            mine.push(median(ts));
        }
        let shared = self.comm.broadcast_f64(0, &mine)?;
        let forward_s: Vec<(Kind, f64)> = candidates.iter().copied().zip(shared).collect();
        let schedule = fastest(&forward_s).ok_or(DistError::BadTune { candidates: candidates.len(), reps })?;
        Ok(Tuned { schedule, forward_s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_finite_time_wins_and_the_first_wins_a_tie() {
        let t = [(Kind::Ring, 2.0), (Kind::PatternRing, 1.5), (Kind::AllGather, 1.5), (Kind::Ulysses, f64::NAN)];
        assert_eq!(fastest(&t), Some(Kind::PatternRing));
        assert_eq!(fastest(&[(Kind::Ulysses, 0.5), (Kind::Ring, 1.0)]), Some(Kind::Ulysses));
        assert_eq!(fastest(&[(Kind::Ring, f64::NAN), (Kind::AllGather, f64::INFINITY)]), None);
        assert_eq!(fastest(&[]), None);
    }
}
