use ringdil_proofs::{naive_attention, rel_err};
use ringdil_reference::{attention, pattern::{Dilated, key_counts}, random::normal_tensor, Spec, Pattern};

#[test]
fn smoke() {
    let (b, n, h, d) = (2, 37, 3, 8);
    let q = normal_tensor([b, n, h, d], 1);
    let k = normal_tensor([b, n, h, d], 2);
    let v = normal_tensor([b, n, h, d], 3);
    let pat = Dilated::longnet(&[(4, 1), (8, 2), (16, 4)]);
    let spec = Spec::new(pat.clone()).causal(true);
    let got = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let (o, l) = naive_attention(q.view(), k.view(), v.view(), 1.0 / (d as f64).sqrt(), |_, hh, i, j| {
        if j > i { 0 } else { key_counts(&pat, i, hh, h, n)[j] }
    });
    let e = rel_err(got.out.iter(), o.iter());
    println!("err {e}");
    assert!(e < 1e-12);
    let _ = (l, &pat as &dyn Pattern);
}
