//! Every error reachable from user input comes back as the right typed `Error`, naming
//! the offending value, from every entry point (forward, backward, chunked forward and
//! backward), and its `Display` text names the value too (`"dilation_rate 5"`, the
//! index of a NaN, ...), so that a bad argument never becomes a panic or silently
//! wrong numbers.

use ndarray::{Array3, Array4, Axis};
use ringdil_proofs::qkv;
use ringdil_reference::pattern::{BlockSparse, Branch, Combine, Dilated, Explicit, Offset};
use ringdil_reference::{
    Attention, Error, OutputGrad, Partial, Spec, attend_chunk, attention, attention_backward, backward_chunk,
};

/// Assert `err == want` and that its message contains every one of `words`.
fn expect(err: Error, want: Error, words: &[&str]) {
    assert_eq!(err, want);
    let text = err.to_string();
    for w in words {
        assert!(text.contains(w), "message {text:?} does not contain {w:?}");
    }
}

/// The error of a spec (or of shapes) as seen by all four entry points, which must
/// agree: `attention`, `attention_backward` (given a well-formed forward result),
/// `attend_chunk` and `backward_chunk` over all positions.
fn error_everywhere(spec: &Spec, q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>) -> Error {
    let forward_err = attention(q.view(), k.view(), v.view(), spec).unwrap_err();
    let (b, n, h, _) = q.dim();
    let dv = v.dim().3;
    let fwd = Attention { out: Array4::zeros((b, n, h, dv)), lse: Array3::zeros((b, h, n)) };
    let d_out = Array4::<f64>::ones((b, n, h, dv));
    let backward_err = attention_backward(q.view(), k.view(), v.view(), spec, &fwd, d_out.view()).unwrap_err();
    let all: Vec<usize> = (0..n).collect();
    let chunk_err = attend_chunk(q.view(), &all, k.view(), v.view(), &all, n, spec).unwrap_err();
    let grad = OutputGrad::new(spec, &fwd, d_out.view()).unwrap();
    let chunk_backward_err = backward_chunk(q.view(), &all, k.view(), v.view(), &all, n, spec, &grad).unwrap_err();
    // Compared through `Debug`, since a NaN in an error makes `==` false.
    let same = |a: &Error, b: &Error| format!("{a:?}") == format!("{b:?}");
    assert!(same(&forward_err, &backward_err), "forward {forward_err:?} vs backward {backward_err:?}");
    assert!(same(&forward_err, &chunk_err), "attention {forward_err:?} vs attend_chunk {chunk_err:?}");
    assert!(
        same(&forward_err, &chunk_backward_err),
        "attention {forward_err:?} vs backward_chunk {chunk_backward_err:?}"
    );
    forward_err
}

/// The error of `spec` on valid random tensors of `shape`.
fn spec_error(spec: Spec, shape: [usize; 4]) -> Error {
    let (q, k, v) = qkv(shape, 1);
    error_everywhere(&spec, &q, &k, &v)
}

const SHAPE: [usize; 4] = [2, 8, 3, 4];

#[test]
fn dilated_parameters() {
    let err = |p: Dilated| spec_error(Spec::new(p), SHAPE);
    expect(
        err(Dilated::longnet(&[(4, 1), (0, 1)])),
        Error::SegmentZero { branch: 1 },
        &["branch 1", "segment_length is 0"],
    );
    expect(err(Dilated::longnet(&[(4, 0)])), Error::DilationZero { branch: 0 }, &["branch 0", "dilation_rate is 0"]);
    expect(
        err(Dilated::torchscale(&[(4, 1), (4, 5)])),
        Error::DilationExceedsSegment { branch: 1, dilation: 5, segment: 4 },
        &["branch 1", "dilation_rate 5", "segment_length 4"],
    );
    let fixed = Dilated {
        branches: vec![Branch { segment: 8, dilation: 2, offset: Offset::Fixed(3) }],
        combine: Combine::SoftmaxDenominator,
    };
    expect(err(fixed), Error::OffsetOutOfRange { branch: 0, offset: 3, dilation: 2 }, &["offset 3", "dilation_rate 2"]);
    expect(err(Dilated::longnet(&[])), Error::NoBranches, &["at least one"]);
    // Three head groups need at least three heads; SHAPE has 3, so use 2.
    expect(
        spec_error(Spec::new(Dilated::head_groups(&[(4, 1), (8, 2), (8, 4)])), [1, 8, 2, 4]),
        Error::TooFewHeads { heads: 2, branches: 3 },
        &["2 heads", "3 non-empty groups"],
    );
}

#[test]
fn block_sparse_and_explicit_parameters() {
    let base = BlockSparse::local(4, 1);
    expect(
        spec_error(Spec::new(BlockSparse { block: 0, ..base.clone() }), SHAPE),
        Error::ZeroParameter { pattern: "block_sparse", parameter: "block" },
        &["`block` is 0"],
    );
    expect(
        spec_error(Spec::new(BlockSparse { dilated_stride: Some(0), ..base.clone() }), SHAPE),
        Error::ZeroParameter { pattern: "block_sparse", parameter: "dilated_stride" },
        &["`dilated_stride` is 0"],
    );
    // n = 10, block 4: 3 x 3 blocks needed.
    let shape = [1, 10, 2, 3];
    let too_few_rows = BlockSparse { block_mask: Some(vec![vec![true; 3]; 2]), ..base.clone() };
    expect(
        spec_error(Spec::new(too_few_rows), shape),
        Error::BlockMaskTooSmall { blocks_needed: 3, rows: 2, cols: 3 },
        &["2x3", "3x3"],
    );
    let short_row = BlockSparse { block_mask: Some(vec![vec![true; 3], vec![true; 2], vec![true; 3]]), ..base };
    expect(
        spec_error(Spec::new(short_row), shape),
        Error::BlockMaskTooSmall { blocks_needed: 3, rows: 3, cols: 2 },
        &["3x2"],
    );
    let mask = Explicit { counts: Array3::ones((2, 5, 5)) };
    expect(
        spec_error(Spec::new(mask), [1, 6, 2, 3]),
        Error::MaskShape { expected: vec![2, 6, 6], got: vec![2, 5, 5] },
        &["[2, 6, 6]", "[2, 5, 5]"],
    );
}

#[test]
fn spec_values() {
    for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        let err = spec_error(Spec::dense().scale(bad), SHAPE);
        assert!(matches!(err, Error::BadScale { scale } if scale.to_bits() == bad.to_bits()), "{err:?}");
        assert!(err.to_string().contains(&format!("softmax scale {bad}")), "{err}");
    }
    expect(
        spec_error(Spec::dense().key_lengths(vec![8, 8, 8]), SHAPE),
        Error::ShapeMismatch { what: "key_lengths", expected: vec![2], got: vec![3] },
        &["key_lengths", "[2]", "[3]"],
    );
    expect(
        spec_error(Spec::dense().key_lengths(vec![4, 9]), SHAPE),
        Error::KeyPaddingTooLong { batch: 1, length: 9, seq: 8 },
        &["batch row 1", "length 9", "seq 8"],
    );
}

#[test]
fn zero_dimensions() {
    for (axis, name) in ["batch", "seq", "heads", "head_dim"].into_iter().enumerate() {
        let mut shape = SHAPE;
        shape[axis] = 0;
        let (q, k, v) = qkv(shape, 2);
        let err = attention(q.view(), k.view(), v.view(), &Spec::dense()).unwrap_err();
        expect(err, Error::ZeroDim { tensor: "q", dim: name }, &[&format!("q: dimension `{name}` is 0")]);
    }
    // A value head_dim of 0 is named on `v`.
    let (q, k, _) = qkv(SHAPE, 3);
    let v = Array4::<f64>::zeros((2, 8, 3, 0));
    expect(
        error_everywhere(&Spec::dense(), &q, &k, &v),
        Error::ZeroDim { tensor: "v", dim: "head_dim" },
        &["v: dimension"],
    );
}

#[test]
fn mismatched_shapes() {
    let (q, k, v) = qkv(SHAPE, 4);
    let other = |shape: [usize; 4]| qkv(shape, 5).0;
    // `k` sets the K/V heads (grouped-query attention, tests/gqa.rs), so its head_dim
    // and batch are what it can get wrong.
    expect(
        error_everywhere(&Spec::dense(), &q, &other([2, 8, 3, 5]), &v),
        Error::ShapeMismatch { what: "k", expected: vec![2, 8, 3, 4], got: vec![2, 8, 3, 5] },
        &["k: expected shape [2, 8, 3, 4], got [2, 8, 3, 5]"],
    );
    expect(
        error_everywhere(&Spec::dense(), &q, &k, &other([1, 8, 3, 4])),
        Error::ShapeMismatch { what: "v", expected: vec![2, 8, 3, 4], got: vec![1, 8, 3, 4] },
        &["v: expected", "[1, 8, 3, 4]"],
    );
    // Self-attention needs as many keys as queries.
    let err = attention(q.view(), other([2, 7, 3, 4]).view(), other([2, 7, 3, 4]).view(), &Spec::dense()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { expected, got, .. } if expected == [8] && got == [7]));

    // The upstream gradient must be shaped like the output.
    let fwd = attention(q.view(), k.view(), v.view(), &Spec::dense()).unwrap();
    let d_out = other([2, 8, 3, 3]);
    expect(
        attention_backward(q.view(), k.view(), v.view(), &Spec::dense(), &fwd, d_out.view()).unwrap_err(),
        Error::ShapeMismatch { what: "d_out", expected: vec![2, 8, 3, 4], got: vec![2, 8, 3, 3] },
        &["d_out"],
    );
    // A chunk's gradient rows must be the chunk's query rows.
    let all: Vec<usize> = (0..8).collect();
    let grad = OutputGrad::new(&Spec::dense(), &fwd, other(SHAPE).view()).unwrap().select_rows(&[0, 1, 2]);
    let err = backward_chunk(q.view(), &all, k.view(), v.view(), &all, 8, &Spec::dense(), &grad).unwrap_err();
    expect(
        err,
        Error::ShapeMismatch { what: "d_out", expected: vec![2, 8, 3, 4], got: vec![2, 3, 3, 4] },
        &["[2, 3, 3, 4]"],
    );
    // Position lists must match the rows they label.
    let err = attend_chunk(q.view(), &all[..7], k.view(), v.view(), &all, 8, &Spec::dense()).unwrap_err();
    expect(err, Error::ShapeMismatch { what: "q positions", expected: vec![8], got: vec![7] }, &["q positions"]);
}

#[test]
fn non_finite_inputs_name_tensor_and_index() {
    let spec = Spec::dense();
    let (q, k, v) = qkv(SHAPE, 6);
    let mut bad_q = q.clone();
    bad_q[[1, 2, 0, 3]] = f64::NAN;
    let err = error_everywhere(&spec, &bad_q, &k, &v);
    assert!(
        matches!(&err, Error::NonFinite { tensor: "q", index, value } if *index == [1, 2, 0, 3] && value.is_nan()),
        "{err:?}"
    );
    assert!(err.to_string().contains("q: non-finite value NaN at index [1, 2, 0, 3]"), "{err}");

    let mut bad_k = k.clone();
    bad_k[[0, 7, 2, 0]] = f64::INFINITY;
    expect(
        error_everywhere(&spec, &q, &bad_k, &v),
        Error::NonFinite { tensor: "k", index: vec![0, 7, 2, 0], value: f64::INFINITY },
        &["k: non-finite value inf at index [0, 7, 2, 0]"],
    );
    let mut bad_v = v.clone();
    bad_v[[1, 0, 1, 1]] = f64::NEG_INFINITY;
    expect(
        error_everywhere(&spec, &q, &k, &bad_v),
        Error::NonFinite { tensor: "v", index: vec![1, 0, 1, 1], value: f64::NEG_INFINITY },
        &["-inf", "[1, 0, 1, 1]"],
    );
    // f32 inputs are reported the same way.
    let mut q32 = q.mapv(|x| x as f32);
    q32[[0, 0, 0, 0]] = f32::INFINITY;
    let (k32, v32) = (k.mapv(|x| x as f32), v.mapv(|x| x as f32));
    let err = attention(q32.view(), k32.view(), v32.view(), &spec).unwrap_err();
    assert_eq!(err, Error::NonFinite { tensor: "q", index: vec![0, 0, 0, 0], value: f64::INFINITY });
    // And so is the upstream gradient.
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let mut d_out = Array4::<f64>::ones(fwd.out.raw_dim());
    d_out[[0, 3, 1, 2]] = f64::NAN;
    let err = attention_backward(q.view(), k.view(), v.view(), &spec, &fwd, d_out.view()).unwrap_err();
    assert!(matches!(&err, Error::NonFinite { tensor: "d_out", index, .. } if *index == [0, 3, 1, 2]), "{err:?}");
}

#[test]
fn bad_positions() {
    let spec = Spec::dense();
    let (q, k, v) = qkv([1, 3, 1, 2], 7);
    let err = attend_chunk(q.view(), &[0, 1, 8], k.view(), v.view(), &[0, 1, 2], 8, &spec).unwrap_err();
    expect(
        err,
        Error::BadPosition { what: "q positions", position: 8, seq_len: 8 },
        &["q positions", "position 8", "0..8"],
    );
    let err = attend_chunk(q.view(), &[0, 1, 2], k.view(), v.view(), &[5, 1, 5], 8, &spec).unwrap_err();
    expect(err, Error::BadPosition { what: "k positions", position: 5, seq_len: 8 }, &["k positions", "position 5"]);
    // The backward chunk checks positions the same way.
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let grad = OutputGrad::new(&spec, &fwd, fwd.out.view()).unwrap();
    let err = backward_chunk(q.view(), &[0, 3, 1], k.view(), v.view(), &[0, 1, 2], 3, &spec, &grad).unwrap_err();
    assert_eq!(err, Error::BadPosition { what: "q positions", position: 3, seq_len: 3 });
}

/// A log-sum-exp is finite, or `-inf` for a row with no key (`docs/semantics.md`,
/// section 13). NaN or `+inf` in a merge operand or in a backward's `OutputGrad` is
/// `BadLse`, naming the operand and the index; `-inf` for a row that has keys in the
/// backward's chunk is `LseMismatch`, naming the batch row, head and global query
/// position (a forward would have given the row a finite LSE); `-inf` for a row with no
/// key in the chunk is the empty row, not an error; a NaN `delta` is `NonFinite`.
#[test]
fn bad_lse_values() {
    let spec = Spec::dense().causal(true);
    let (q, k, v) = qkv(SHAPE, 8);
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let a = Partial { out: fwd.out.clone(), lse: fwd.lse.clone() };
    let mut bad = a.clone();
    bad.lse[[1, 2, 5]] = f64::INFINITY;
    expect(
        bad.merge(&a).unwrap_err(),
        Error::BadLse { what: "merge: left operand", index: vec![1, 2, 5], value: f64::INFINITY },
        &["merge: left operand: lse inf at index [1, 2, 5]", "finite, or -inf for a row with no key"],
    );
    bad.lse[[0, 1, 7]] = f64::NAN;
    let err = a.merge(&bad).unwrap_err();
    assert!(
        matches!(&err, Error::BadLse { what: "merge: right operand", index, value } if *index == [0, 1, 7] && value.is_nan()),
        "{err:?}"
    );

    let all: Vec<usize> = (0..8).collect();
    let grad = OutputGrad::new(&spec, &fwd, v.view()).unwrap();
    let backward = |rows: &[usize], keys: &[usize], grad: &OutputGrad<f64>| {
        let (qs, ks, vs) = (q.select(Axis(1), rows), k.select(Axis(1), keys), v.select(Axis(1), keys));
        backward_chunk(qs.view(), rows, ks.view(), vs.view(), keys, 8, &spec, grad)
    };
    let mut g = grad.clone();
    g.lse[[0, 1, 3]] = f64::INFINITY;
    expect(
        backward(&all, &all, &g).unwrap_err(),
        Error::BadLse { what: "backward: OutputGrad", index: vec![0, 1, 3], value: f64::INFINITY },
        &["backward: OutputGrad: lse inf at index [0, 1, 3]"],
    );
    // Queries 5 and 6 over keys 0..3: both rows have keys, and row 1 (query 6) says none.
    let mut g = grad.select_rows(&[5, 6]);
    g.lse[[1, 2, 1]] = f64::NEG_INFINITY;
    expect(
        backward(&[5, 6], &[0, 1, 2], &g).unwrap_err(),
        Error::LseMismatch { batch: 1, head: 2, query: 6 },
        &["batch row 1, head 2, query 6 is -inf", "has keys in this chunk"],
    );
    // Queries 1 and 6 over keys 4, 5: causal query 1 has no key here, so -inf is its
    // empty row: no error and no gradient.
    let mut g = grad.select_rows(&[1, 6]);
    g.lse.index_axis_mut(Axis(2), 0).fill(f64::NEG_INFINITY);
    let grads = backward(&[1, 6], &[4, 5], &g).unwrap();
    assert!(grads.dq.index_axis(Axis(1), 0).iter().all(|&x| x == 0.0));
    // Through attention_backward, with a forward result whose LSE was tampered with.
    let mut tampered = fwd.clone();
    tampered.lse[[0, 0, 4]] = f64::NEG_INFINITY;
    let err = attention_backward(q.view(), k.view(), v.view(), &spec, &tampered, v.view()).unwrap_err();
    assert_eq!(err, Error::LseMismatch { batch: 0, head: 0, query: 4 });
    let mut g = grad.clone();
    g.delta[[1, 0, 2]] = f64::NAN;
    let err = backward(&all, &all, &g).unwrap_err();
    assert!(matches!(&err, Error::NonFinite { tensor: "delta", index, .. } if *index == [1, 0, 2]), "{err:?}");
}
