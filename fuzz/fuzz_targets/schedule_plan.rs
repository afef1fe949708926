//! Plan construction: for any valid layout, pattern, causality and key padding, every
//! schedule (ring, pattern-aware ring, all-gather, Ulysses) computes every allowed
//! (query, key) pair of every head exactly once in each phase, names only ranks, heads
//! and tokens in range, and survives a JSON round trip; the needs equal a brute-force
//! count over `key_counts`, and the pattern-aware plan sends no unused row. Small cases
//! are also replayed on tensors and compared with single-device attention.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ndarray::Array4;
use ringdil_fuzz::{LayoutInput, PatternInput};
use ringdil_reference::pattern::key_counts;
use ringdil_reference::random::normal_tensor;
use ringdil_reference::ring::{
    ChunkPlan, Needs, Op, Schedule, Tensor, all_gather, pattern_ring, ring, simulate, ulysses,
};
use ringdil_reference::{attention, attention_backward};

#[derive(Arbitrary, Debug)]
struct Input {
    n: u8,
    ranks: u8,
    heads: u8,
    layout: LayoutInput,
    pattern: PatternInput,
    causal: bool,
    key_length: Option<u8>,
    seed: u64,
}

fn max_abs_diff(a: &Array4<f64>, b: &Array4<f64>) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fuzz_target!(|input: Input| {
    let n = 1 + (input.n % 24) as usize;
    let (ranks, heads) = (1 + (input.ranks % 8) as usize, 1 + (input.heads % 3) as usize);
    let key_length = input.key_length.map(|l| l as usize % (n + 1));
    let spec = input.pattern.spec(input.causal, key_length);
    if spec.validate(1, heads, n).is_err() {
        assert!(
            Needs::new(&spec, &ChunkPlan::new(n, 1, &ringdil_reference::ring::Layout::Contiguous).unwrap(), heads)
                .is_err()
        );
        return;
    }
    let plan = ChunkPlan::new(n, ranks, &input.layout.valid(n, ranks)).expect("repaired layouts are valid");
    let owner = plan.token_map().rank;
    // allowed[h][q][k], independently of the needs code.
    let limit = key_length.unwrap_or(n);
    let allowed: Vec<Vec<Vec<bool>>> = (0..heads)
        .map(|h| {
            (0..n)
                .map(|q| {
                    let counts = key_counts(&*spec.pattern, q, h, heads, n);
                    (0..n).map(|k| counts[k] > 0 && k < limit && !(spec.causal && k > q)).collect()
                })
                .collect()
        })
        .collect();
    let needs = Needs::new(&spec, &plan, heads).unwrap();
    for d in 0..ranks {
        for s in 0..ranks {
            for (h, seen) in allowed.iter().enumerate() {
                let brute: Vec<usize> =
                    (0..n).filter(|&k| owner[k] == s && plan.tokens(d).iter().any(|&q| seen[q][k])).collect();
                assert_eq!(needs.keys(d, s, h), brute.as_slice(), "need({d}, {s}, {h})");
            }
        }
    }
    let schedules: Vec<Schedule> = vec![
        ring(&plan, &spec, heads).unwrap(),
        pattern_ring(&plan, &spec, heads).unwrap(),
        all_gather(&plan, heads),
        ulysses(&plan, heads),
    ];
    for schedule in &schedules {
        schedule.validate(&spec).unwrap_or_else(|e| panic!("{:?}: {e}", schedule.kind));
        let json = serde_json::to_string(schedule).unwrap();
        assert_eq!(&serde_json::from_str::<Schedule>(&json).unwrap(), schedule);
    }
    for op in schedules[1].forward.iter().flat_map(|s| &s.ops) {
        if let Op::Send { from, to, tensors, heads: hs, tokens } = op {
            assert_eq!(tensors, &[Tensor::K, Tensor::V]);
            for (h, &k) in hs.clone().flat_map(|h| tokens.iter().map(move |k| (h, k))) {
                assert_eq!(owner[k], *from);
                assert!(plan.tokens(*to).iter().any(|&q| allowed[h][q][k]), "unused row {k} head {h} sent to {to}");
            }
        }
    }
    if n <= 12 {
        let shape = [1, n, heads, 2];
        let seed = input.seed >> 8;
        let (q, k, v, g) = (
            normal_tensor(shape, seed),
            normal_tensor(shape, seed + 1),
            normal_tensor(shape, seed + 2),
            normal_tensor(shape, seed + 3),
        );
        let want = attention(q.view(), k.view(), v.view(), &spec).unwrap();
        let want_grad = attention_backward(q.view(), k.view(), v.view(), &spec, &want, g.view()).unwrap();
        for schedule in &schedules {
            let (out, grad, _) = simulate(schedule, &spec, q.view(), k.view(), v.view(), Some(g.view())).unwrap();
            let grad = grad.unwrap();
            for (x, y) in
                [(&out.out, &want.out), (&grad.dq, &want_grad.dq), (&grad.dk, &want_grad.dk), (&grad.dv, &want_grad.dv)]
            {
                assert!(max_abs_diff(x, y) < 1e-9, "{:?} differs from single-device", schedule.kind);
            }
        }
    }
});
