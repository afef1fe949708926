//! The backward pass (dQ, dK, dV from the saved output and LSE) against central finite
//! differences of the forward pass, in f64, for every kind of masking the engine
//! knows: full, causal, key padding, sliding window, block sparse, explicit counts and
//! dilated with both combines (so the head-group `1/G` output scale and LongNet's
//! multiplicities are differentiated too).
//!
//! The loss is `L = sum(out * G)` for a random `G`, so `dL/d out = G` is the upstream
//! gradient given to `attention_backward`.
//!
//! Tolerance, derived: with step `eps = 1e-6` the central difference has truncation
//! error `eps^2 / 6 * |L'''|` (about `1e-12` for these unit-scale inputs) and rounding
//! error about `u * |L| / eps` with `u = 1.1e-16` and `|L| <= ~30` here, i.e. a few `1e-9`
//! per entry, against gradient entries of order `0.1 .. 1`. A relative (Frobenius)
//! error bound of `1e-6` (observed: about `2e-9`) therefore leaves over two orders of magnitude of margin while a
//! wrong term in the backward formulas (missing `delta`, missing scale, wrong count)
//! gives errors of order 1e-2 .. 1.

use ndarray::{Array4, s};
use proptest::prelude::*;
use ringdil_proofs::{Case, any_case, assert_close_floor, config, fd_gradient, qkv};
use ringdil_reference::pattern::{BlockSparse, Dilated, Explicit, SlidingWindow};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{Spec, attention, attention_backward};

/// Finite-difference step (see the module docs).
const EPS: f64 = 1e-6;
/// Relative error bound of analytic vs finite-difference gradients (module docs).
const TOL: f64 = 1e-6;

/// Gradient norms below this are judged absolutely: a gradient that is zero up to
/// rounding (every row with a single key has `dS = 0`, so dQ and dK vanish) has a
/// finite-difference estimate of pure rounding noise (`~1e-9` per entry), and a
/// relative error between two noises means nothing. Real mistakes are `>= 1e-2`.
const FLOOR: f64 = 1.0;

/// Compare dQ, dK, dV of `spec` on seeded inputs of `shape` with finite differences.
fn check_gradients(what: &str, spec: &Spec, shape: [usize; 4], seed: u64) {
    let (q, k, v) = qkv(shape, seed);
    let g = normal_tensor(shape, seed ^ 0x6);
    let loss = |q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>| -> f64 {
        let out = attention(q.view(), k.view(), v.view(), spec).unwrap().out;
        (&out * &g).sum()
    };
    let fwd = attention(q.view(), k.view(), v.view(), spec).unwrap();
    let grads = attention_backward(q.view(), k.view(), v.view(), spec, &fwd, g.view()).unwrap();
    let fd_q = fd_gradient(&q, EPS, |x| loss(x, &k, &v));
    let fd_k = fd_gradient(&k, EPS, |x| loss(&q, x, &v));
    let fd_v = fd_gradient(&v, EPS, |x| loss(&q, &k, x));
    assert_close_floor(&format!("{what}: dq"), &grads.dq, &fd_q, TOL, FLOOR);
    assert_close_floor(&format!("{what}: dk"), &grads.dk, &fd_k, TOL, FLOOR);
    assert_close_floor(&format!("{what}: dv"), &grads.dv, &fd_v, TOL, FLOOR);
}

const SHAPE: [usize; 4] = [2, 9, 3, 4];

#[test]
fn full() {
    check_gradients("full", &Spec::dense(), SHAPE, 1);
}

#[test]
fn causal() {
    check_gradients("causal", &Spec::dense().causal(true), SHAPE, 2);
}

/// Key padding, one batch row padded to 4 keys, with and without causality.
#[test]
fn key_padded() {
    check_gradients("padded", &Spec::dense().key_lengths(vec![9, 4]), SHAPE, 3);
    check_gradients("padded causal", &Spec::dense().key_lengths(vec![4, 6]).causal(true), SHAPE, 4);
}

#[test]
fn sliding_window() {
    check_gradients("window", &Spec::new(SlidingWindow { left: 2, right: 1 }), SHAPE, 5);
    check_gradients("window causal", &Spec::new(SlidingWindow { left: 3, right: 0 }).causal(true), SHAPE, 6);
}

#[test]
fn custom_scale() {
    check_gradients("scale 0.7", &Spec::dense().scale(0.7), SHAPE, 7);
}

/// LongNet's softmax-denominator combine: keys shared by two branches have
/// multiplicity 2; n = 9 leaves a short last segment in both branches.
#[test]
fn dilated_longnet() {
    let branches = [(3, 1), (6, 2)];
    check_gradients("longnet", &Spec::new(Dilated::longnet(&branches)), SHAPE, 8);
    check_gradients("longnet causal", &Spec::new(Dilated::longnet(&branches)).causal(true), SHAPE, 9);
    check_gradients("torchscale", &Spec::new(Dilated::torchscale(&branches)), SHAPE, 10);
}

/// The head-group combine divides the output by G = 2: the backward must scale dO.
#[test]
fn dilated_head_groups() {
    let pattern = Dilated::head_groups(&[(3, 1), (6, 2)]);
    check_gradients("head groups", &Spec::new(pattern.clone()), SHAPE, 11);
    check_gradients("head groups causal", &Spec::new(pattern).causal(true), SHAPE, 12);
}

#[test]
fn block_sparse_and_explicit_counts() {
    let bs =
        BlockSparse { block: 2, local_radius: Some(0), dilated_stride: Some(3), global_tokens: 1, block_mask: None };
    check_gradients("block sparse", &Spec::new(bs), SHAPE, 13);
    let (h, n) = (SHAPE[2], SHAPE[1]);
    let counts = Explicit::from_fn(h, n, |hh, i, j| ((i + 2 * j + hh) % 4) as u32);
    check_gradients("explicit counts 0..3", &Spec::new(counts), SHAPE, 14);
}

proptest! {
    #![proptest_config(config(24))]

    /// Any pattern, causality, padding and scale from the shared case strategy, on
    /// small sizes (finite differences cost two forwards per input entry).
    #[test]
    fn any_case_matches_finite_differences(case in any_case(10)) {
        let Case { spec, seed, .. } = &case;
        check_gradients(&format!("{case:?}"), spec, case.shape(), *seed);
    }
}

/// Rows with no allowed key (a batch row with key length 0; a dilated head whose
/// offset lies past a short last segment) have output 0 and get exactly zero dq; keys
/// no query may see get exactly zero dk and dv; nothing is NaN.
#[test]
fn rows_without_keys_get_zero_gradient() {
    let shape = [2, 5, 2, 3];
    let (q, k, v) = qkv(shape, 21);
    let g = normal_tensor(shape, 22);
    // Batch row 0: no keys at all. Batch row 1: keys 0..3, so keys 3 and 4 are unseen.
    let spec = Spec::dense().key_lengths(vec![0, 3]);
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let grads = attention_backward(q.view(), k.view(), v.view(), &spec, &fwd, g.view()).unwrap();
    for x in [&grads.dq, &grads.dk, &grads.dv] {
        assert!(x.iter().all(|x| x.is_finite()));
        assert!(x.slice(s![0, .., .., ..]).iter().all(|&x| x == 0.0));
    }
    assert!(grads.dk.slice(s![1, 3.., .., ..]).iter().all(|&x| x == 0.0));
    assert!(grads.dv.slice(s![1, 3.., .., ..]).iter().all(|&x| x == 0.0));
    assert!(grads.dq.slice(s![1, .., .., ..]).iter().any(|&x| x != 0.0), "the unpadded row must get a gradient");

    // Dilated (4, 2) on 5 tokens: the last segment is {4}; head 1 (offset 1) keeps no
    // query there, so query 4 of head 1 has no key.
    let spec = Spec::new(Dilated::longnet(&[(4, 2)]));
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    assert_eq!(fwd.lse[[0, 1, 4]], f64::NEG_INFINITY);
    let grads = attention_backward(q.view(), k.view(), v.view(), &spec, &fwd, g.view()).unwrap();
    assert!(grads.dq.iter().chain(&grads.dk).chain(&grads.dv).all(|x| x.is_finite()));
    for b in 0..2 {
        for i in [0, 2, 4] {
            // Head 1 keeps only odd positions: queries 0, 2, 4 take no part.
            assert!(grads.dq.slice(s![b, i, 1, ..]).iter().all(|&x| x == 0.0));
            assert!(grads.dk.slice(s![b, i, 1, ..]).iter().all(|&x| x == 0.0));
        }
    }
}
