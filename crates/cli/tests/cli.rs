//! The `ringdil` binary as a user runs it: its text outputs and error messages are
//! insta snapshots (a wording change is a visible diff), and `attend` is checked
//! numerically against the library on tensors written to .npy files.

use ndarray::{Array3, Array4};
use ndarray_npy::{read_npy, write_npy};
use ringdil_cuda::Dtype;
use ringdil_cuda::check::rounded;
use ringdil_reference::compare::rel_err;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::{SplitMix64, normal_tensor};
use ringdil_reference::{Spec, attention};

mod common;
use common::{npy_files, ringdil, scratch, workspace};

#[test]
fn verify_default_sweep_passes_and_prints_its_table() {
    let (stdout, _, code) = ringdil(&["verify", "--cases", "4", "--seed", "7"]);
    assert_eq!(code, 0, "{stdout}");
    // Error values depend on summation order (thread count); everything else is fixed.
    insta::with_settings!({filters => vec![(r" +\d\.\d\de-?\d+", " [err]")]}, {
        insta::assert_snapshot!(stdout);
    });
}

#[test]
fn verify_json_reports_every_row() {
    let (stdout, _, code) = ringdil(&["verify", "--cases", "3", "--json"]);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3 * 5);
    assert!(rows.iter().all(|r| r["pass"] == true && r["rel_err"].as_f64().unwrap() <= r["bound"].as_f64().unwrap()));
}

#[test]
fn verify_with_a_pattern_file_uses_it_for_every_case() {
    let (stdout, _, code) = ringdil(&["verify", "--cases", "2", "--pattern", "docs/patterns/longnet.json"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.matches("docs/patterns/longnet.json").count(), 2 * 5, "{stdout}");
}

#[test]
fn pattern_show_prints_statistics() {
    let (stdout, stderr, code) =
        ringdil(&["pattern", "show", "docs/patterns/longnet.json", "--seq", "64", "--heads", "2"]);
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!(stdout);
}

#[test]
fn pattern_show_writes_a_png() {
    let png = scratch("mask.png");
    let png_arg = png.to_str().unwrap();
    let (_, stderr, code) = ringdil(&[
        "pattern",
        "show",
        "docs/patterns/bigbird.json",
        "--seq",
        "50",
        "--heads",
        "3",
        "--all-heads",
        "--png",
        png_arg,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(&png).expect("png written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width = 3 panels of 50 * zoom 10 plus 2 gaps of 8; height = 500.
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (3 * 500 + 2 * 8, 500));
}

/// Each bad pattern file, and the exact message the user gets.
#[test]
fn bad_pattern_files_name_the_field_and_allowed_values() {
    let cases = [
        ("unknown_kind", r#"{"kind": "dilatd"}"#),
        ("missing_kind", r#"{"segment_lengths": [4]}"#),
        ("bad_combine", r#"{"kind": "dilated", "segment_lengths": [4], "dilation_rates": [1], "combine": "avg"}"#),
        ("typo_field", r#"{"kind": "dilated", "segment_lengths": [4], "dilation_rates": [1], "offset": "head_mod"}"#),
        ("bad_offsets", r#"{"kind": "dilated", "segment_lengths": [4], "dilation_rates": [1], "offsets": "foo"}"#),
        ("lengths", r#"{"kind": "dilated", "segment_lengths": [4, 8], "dilation_rates": [1]}"#),
        ("dilation_zero", r#"{"kind": "dilated", "segment_lengths": [4], "dilation_rates": [0]}"#),
        ("dilation_over_segment", r#"{"kind": "dilated", "segment_lengths": [4], "dilation_rates": [8]}"#),
        ("segment_zero", r#"{"kind": "dilated", "segment_lengths": [0], "dilation_rates": [1]}"#),
        ("block_zero", r#"{"kind": "block_sparse", "block": 0}"#),
        ("not_json", "{kind: dense"),
    ];
    let mut report = String::new();
    for (name, text) in cases {
        let path = scratch(&format!("{name}.json"));
        std::fs::write(&path, text).unwrap();
        let (_, stderr, code) = ringdil(&["pattern", "show", path.to_str().unwrap(), "--seq", "16"]);
        assert_eq!(code, 2, "{name} must be rejected");
        report.push_str(&format!("{name}: {}", stderr.replace(path.to_str().unwrap(), "FILE")));
    }
    insta::assert_snapshot!(report);
}

#[test]
fn toml_pattern_files_parse_like_json() {
    let (json, _, a) = ringdil(&["pattern", "show", "docs/patterns/longnet.json", "--seq", "40"]);
    let toml = scratch("longnet.toml");
    std::fs::write(
        &toml,
        "kind = \"dilated\"\nsegment_lengths = [16, 32, 64]\ndilation_rates = [1, 2, 4]\noffsets = \"head_mod\"\ncausal = true\n",
    )
    .unwrap();
    let (from_toml, _, b) = ringdil(&["pattern", "show", toml.to_str().unwrap(), "--seq", "40"]);
    assert_eq!((a, b), (0, 0));
    assert_eq!(json, from_toml);
}

#[test]
fn attend_matches_the_library_on_npy_files() {
    let shape = [2, 45, 3, 8];
    let (q, k, v) = (normal_tensor(shape, 11), normal_tensor(shape, 12), normal_tensor(shape, 13));
    let paths = npy_files("attend", &[&q, &k, &v], &["o", "l"]);
    let arg = |i: usize| paths[i].clone();
    let (_, stderr, code) = ringdil(&[
        "attend",
        "--q",
        &arg(0),
        "--k",
        &arg(1),
        "--v",
        &arg(2),
        "--pattern",
        "docs/patterns/longnet.json",
        "--out",
        &arg(3),
        "--lse",
        &arg(4),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let out: Array4<f64> = read_npy(&paths[3]).unwrap();
    let lse: Array3<f64> = read_npy(&paths[4]).unwrap();
    let spec = Spec::new(Dilated::longnet(&[(16, 1), (32, 2), (64, 4)])).causal(true);
    let expected = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    assert!(rel_err(&out, &expected.out) < 1e-14);
    assert!(rel_err(&lse, &expected.lse) < 1e-14);
}

/// The same tensors on 3 simulated ranks (every schedule) give the single-device output
/// back in the original token order, and the report says what each rank sent.
#[test]
fn attend_on_simulated_ranks_matches_single_device() {
    let shape = [1, 23, 2, 4];
    let (q, k, v) = (normal_tensor(shape, 21), normal_tensor(shape, 22), normal_tensor(shape, 23));
    let paths = npy_files("ring", &[&q, &k, &v], &["o"]);
    let arg = |i: usize| paths[i].clone();
    let spec = Spec::new(Dilated::longnet(&[(16, 1), (32, 2), (64, 4)])).causal(true);
    let expected = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    for schedule in ["ring", "pattern", "all-gather", "ulysses"] {
        let (stdout, stderr, code) = ringdil(&[
            "attend",
            "--q",
            &arg(0),
            "--k",
            &arg(1),
            "--v",
            &arg(2),
            "--pattern",
            "docs/patterns/longnet.json",
            "--out",
            &arg(3),
            "--ring",
            "3",
            "--layout",
            "striped",
            "--schedule",
            schedule,
            "--json",
        ]);
        assert_eq!(code, 0, "{schedule}: {stderr}");
        let out: Array4<f64> = read_npy(&paths[3]).unwrap();
        assert!(rel_err(&out, &expected.out) < 1e-13, "{schedule}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["distributed"]["peak"].as_array().unwrap().len(), 3, "{schedule}");
    }
}

/// `--documents FILE.json` packs documents into the rows (one boundary list per batch
/// row): the output equals the library's packed attention, on one device and on
/// simulated ranks; a bad list is refused with the library's message.
#[test]
fn attend_packs_documents() {
    let shape = [2, 23, 2, 4];
    let (q, k, v) = (normal_tensor(shape, 31), normal_tensor(shape, 32), normal_tensor(shape, 33));
    let paths = npy_files("documents", &[&q, &k, &v], &["o"]);
    let arg = |i: usize| paths[i].clone();
    let lists = vec![vec![0, 5, 5, 17, 23], vec![0, 1, 23]];
    let docs = scratch("documents-docs.json");
    std::fs::write(&docs, serde_json::to_string(&lists).unwrap()).unwrap();
    let spec = Spec::new(Dilated::longnet(&[(16, 1), (32, 2), (64, 4)]))
        .causal(true)
        .documents(ringdil_reference::Documents::per_row(lists));
    let expected = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let docs_arg = docs.to_str().unwrap().to_string();
    let base = ["attend", "--q", &arg(0), "--k", &arg(1), "--v", &arg(2), "--pattern", "docs/patterns/longnet.json"];
    for extra in [&[][..], &["--ring", "3", "--schedule", "pattern"][..]] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(["--documents", &docs_arg, "--out", &paths[3]]);
        args.extend(extra);
        let (_, stderr, code) = ringdil(&args);
        assert_eq!(code, 0, "{extra:?}: {stderr}");
        let out: Array4<f64> = read_npy(&paths[3]).unwrap();
        assert!(rel_err(&out, &expected.out) < 1e-13, "{extra:?}");
    }
    std::fs::write(&docs, "[[0, 23], [0, 9, 4, 23]]").unwrap();
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["--documents", &docs_arg, "--out", &paths[3]]);
    let (_, stderr, code) = ringdil(&args);
    assert_eq!(code, 2);
    assert!(stderr.contains("boundary 2 is 4, smaller than boundary 1 = 9"), "{stderr}");
}

/// Grouped-query attention from the shapes alone: `k`, `v` with one head (multi-query)
/// against `q` with three, on one device and on 3 simulated ranks with every schedule.
#[test]
fn attend_takes_kv_heads_from_the_shapes() {
    let (q, k, v) =
        (normal_tensor([1, 17, 3, 4], 31), normal_tensor([1, 17, 1, 4], 32), normal_tensor([1, 17, 1, 4], 33));
    let paths = npy_files("gqa", &[&q, &k, &v], &["o"]);
    let expected = attention(q.view(), k.view(), v.view(), &Spec::dense().causal(true)).unwrap();
    let base = ["attend", "--q", &paths[0], "--k", &paths[1], "--v", &paths[2], "--out", &paths[3], "--causal"];
    for schedule in [None, Some("ring"), Some("pattern"), Some("all-gather"), Some("ulysses")] {
        let mut args = base.to_vec();
        if let Some(s) = schedule {
            args.extend(["--ring", "3", "--schedule", s]);
        }
        let (_, stderr, code) = ringdil(&args);
        assert_eq!(code, 0, "{schedule:?}: {stderr}");
        let out: Array4<f64> = read_npy(&paths[3]).unwrap();
        assert_eq!(out.dim(), (1, 17, 3, 4));
        assert!(rel_err(&out, &expected.out) < 1e-13, "{schedule:?}");
    }
}

/// `plan --kv-heads`: the ring moves only K/V rows, so 4 query heads over 1 K/V head
/// send a quarter of the multi-head bytes; a count that does not divide is refused.
#[test]
fn plan_costs_kv_rows_at_the_kv_heads() {
    let total = |kv: &str| -> u64 {
        let args = ["plan", "docs/patterns/longnet.json", "--seq", "64", "--ranks", "4", "--heads", "4"];
        let (stdout, stderr, code) =
            ringdil(&[&args[..], &["--kv-heads", kv, "--schedule", "ring", "--json"]].concat());
        assert_eq!(code, 0, "{stderr}");
        let plan: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(plan["cost"]["kv_heads"].as_u64(), kv.parse().ok());
        let sum = |phase: &str| {
            plan["cost"][phase]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s.as_array().unwrap())
                .map(|b| b.as_u64().unwrap())
                .sum::<u64>()
        };
        sum("forward") + sum("backward")
    };
    assert_eq!(4 * total("1"), total("4"));
    let (stdout, _, code) =
        ringdil(&["plan", "docs/patterns/longnet.json", "--seq", "64", "--heads", "4", "--kv-heads", "2"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("4 heads over 2 K/V heads"), "{stdout}");
    let (_, stderr, code) = ringdil(&["plan", "docs/patterns/longnet.json", "--heads", "4", "--kv-heads", "3"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("3 K/V heads do not divide 4 query heads"), "{stderr}");
}

/// `plan --value-dim`: V and dV rows travel at v's head dim beside K and dK at q's, so on
/// the ring (and the pattern-aware ring, which moves the same K and V rows) 192 / 128
/// costs what 160 / 160 does; the dense ring's forward is (ranks - 1) seq rows of
/// (192 + 128) elements. The text names both dims; a zero dim is refused.
#[test]
fn plan_costs_v_rows_at_the_value_dim() {
    let plan = |schedule: &str, dims: &[&str]| -> serde_json::Value {
        let args = ["plan", "docs/patterns/longnet.json", "--seq", "96", "--ranks", "3", "--heads", "2"];
        let (stdout, stderr, code) = ringdil(&[&args[..], dims, &["--schedule", schedule, "--json"]].concat());
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()["cost"].clone()
    };
    let sum = |cost: &serde_json::Value, phase: &str| -> u64 {
        let steps = cost[phase].as_array().unwrap();
        steps.iter().flat_map(|s| s.as_array().unwrap()).map(|b| b.as_u64().unwrap()).sum()
    };
    for schedule in ["ring", "pattern"] {
        let mla = plan(schedule, &["--head-dim", "192", "--value-dim", "128"]);
        let even = plan(schedule, &["--head-dim", "160"]);
        assert_eq!((mla["head_dim"].as_u64(), mla["value_dim"].as_u64()), (Some(192), Some(128)));
        assert_eq!(even["value_dim"].as_u64(), Some(160), "the default is --head-dim");
        for phase in ["forward", "backward"] {
            assert!(sum(&mla, phase) > 0, "{schedule} {phase}");
            assert_eq!(sum(&mla, phase), sum(&even, phase), "{schedule} {phase}");
        }
        assert_eq!(mla["dense_ring_forward"].as_u64(), Some(2 * 96 * 2 * (192 + 128) * 2));
    }
    let (stdout, _, code) =
        ringdil(&["plan", "docs/patterns/longnet.json", "--seq", "64", "--head-dim", "192", "--value-dim", "128"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("head_dim 192, value head_dim 128"), "{stdout}");
    let (_, stderr, code) = ringdil(&["plan", "docs/patterns/longnet.json", "--value-dim", "0"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("'0'") && stderr.contains("--value-dim"), "{stderr}");
}

/// A small plan, as text: who sends how much at each step, against the dense ring.
#[test]
fn plan_prints_bytes_per_rank_and_step() {
    let (stdout, stderr, code) = ringdil(&[
        "plan",
        "docs/patterns/longnet.json",
        "--seq",
        "128",
        "--ranks",
        "4",
        "--heads",
        "2",
        "--head-dim",
        "64",
    ]);
    assert_eq!(code, 0, "{stderr}");
    insta::assert_snapshot!(stdout);
    let svg = scratch("plan.svg");
    let (_, _, code) = ringdil(&[
        "plan",
        "docs/patterns/longnet.json",
        "--seq",
        "128",
        "--ranks",
        "4",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawing.starts_with("<svg") && drawing.matches("<rect").count() == 4 * 8,
        "4 ranks x (4 forward + 4 backward steps)"
    );
}

#[test]
fn plan_rejects_bad_boundaries() {
    let (_, stderr, code) =
        ringdil(&["plan", "docs/patterns/longnet.json", "--seq", "10", "--ranks", "2", "--boundaries", "0,4,9"]);
    assert_eq!(code, 2);
    insta::assert_snapshot!(stderr);
}

#[test]
fn attend_rejects_tensors_that_are_not_4d() {
    let path = scratch("three-d.npy");
    write_npy(&path, &Array3::<f64>::zeros((2, 3, 4))).unwrap();
    let p = path.to_str().unwrap();
    let out = scratch("unused.npy");
    let (_, stderr, code) = ringdil(&["attend", "--q", p, "--k", p, "--v", p, "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("shape [2, 3, 4] is not 4-dimensional"), "{stderr}");
}

#[test]
fn attend_reports_non_finite_inputs_by_index() {
    let mut q = normal_tensor([1, 5, 1, 2], 1);
    q[[0, 3, 0, 1]] = f64::NAN;
    let path = scratch("nan.npy");
    write_npy(&path, &q).unwrap();
    let p = path.to_str().unwrap();
    let out = scratch("unused2.npy");
    let (_, stderr, code) = ringdil(&["attend", "--q", p, "--k", p, "--v", p, "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("q: non-finite value NaN at index [0, 3, 0, 1]"), "{stderr}");
}

/// docs/guide/cli.md quotes every command's `--help` verbatim; regenerate it when the
/// help changes (the command is in the page's first lines).
#[test]
fn cli_reference_page_quotes_the_current_help() {
    let page = std::fs::read_to_string(workspace().join("docs/guide/cli.md")).unwrap();
    for command in [vec![], vec!["verify"], vec!["attend"], vec!["pattern", "show"], vec!["plan"], vec!["launch"]] {
        let mut args = command.clone();
        args.push("--help");
        let (help, _, code) = ringdil(&args);
        assert_eq!(code, 0);
        assert!(page.contains(&help), "docs/guide/cli.md is out of date for `ringdil {}`", command.join(" "));
    }
}

/// `launch` gives every worker its rank, world size, NCCL id file and GPU, and names the
/// rank that failed.
#[test]
fn launch_starts_one_process_per_rank_with_its_environment() {
    let (stdout, stderr, code) = ringdil(&[
        "launch",
        "--nproc",
        "3",
        "--",
        "/bin/sh",
        "-c",
        "echo rank=$RINGDIL_RANK local=$RINGDIL_LOCAL_RANK world=$RINGDIL_WORLD gpu=$CUDA_VISIBLE_DEVICES id=${RINGDIL_NCCL_ID_FILE:+set}",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "rank=0 local=0 world=3 gpu=0 id=set",
            "rank=1 local=1 world=3 gpu=1 id=set",
            "rank=2 local=2 world=3 gpu=2 id=set",
        ]
    );
    let (_, stderr, code) = ringdil(&["launch", "--nproc", "2", "--", "/bin/sh", "-c", "exit $RINGDIL_RANK"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("worker rank 1"), "{stderr}");
    let (_, stderr, code) = ringdil(&["launch", "--nproc", "0", "--", "true"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("nproc = 0"), "{stderr}");
}

/// bf16 tensors in one .safetensors file, named as FILE:NAME, are widened exactly and
/// computed in f32: the output matches f64 attention on the same rounded values to f32
/// precision.
#[test]
fn attend_reads_bf16_safetensors() {
    let shape = [1, 37, 2, 8];
    let (bits, values): (Vec<Vec<u16>>, Vec<Array4<f64>>) =
        (31..34).map(|seed| rounded(shape, Dtype::Bf16, &mut SplitMix64::new(seed))).unzip();
    let bytes: Vec<Vec<u8>> = bits.iter().map(|t| t.iter().flat_map(|b| b.to_le_bytes()).collect()).collect();
    let views: Vec<(&str, safetensors::tensor::TensorView)> = ["q", "k", "v"]
        .iter()
        .zip(&bytes)
        .map(|(name, b)| {
            (*name, safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, shape.to_vec(), b).unwrap())
        })
        .collect();
    let file = scratch("qkv.safetensors");
    safetensors::serialize_to_file(views, None, &file).unwrap();
    let out = scratch("st-out.npy");
    let f = file.to_str().unwrap();
    let (stdout, stderr, code) = ringdil(&[
        "attend",
        "--q",
        &format!("{f}:q"),
        "--k",
        &format!("{f}:k"),
        "--v",
        &format!("{f}:v"),
        "--causal",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["dtype"], "f32");
    let got: Array4<f32> = read_npy(&out).unwrap();
    let expected =
        attention(values[0].view(), values[1].view(), values[2].view(), &Spec::dense().causal(true)).unwrap();
    let err = rel_err(&got.mapv(f64::from), &expected.out);
    assert!(err < 1e-5, "{err}");
    // A file with several tensors needs a name.
    let (_, stderr, code) = ringdil(&["attend", "--q", f, "--k", f, "--v", f, "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("name one as"), "{stderr}");
}

/// The GPU options' misuse and inputs the kernels cannot take are errors naming the
/// option or the value, before any device is looked for (so they hold on every machine).
#[test]
fn attend_gpu_misuse_and_unrepresentable_inputs_are_errors() {
    let shape = [1, 8, 1, 64];
    let (mut q, k, mut v) = (normal_tensor(shape, 41), normal_tensor(shape, 42), normal_tensor(shape, 43));
    q[[0, 3, 0, 5]] = 7.0e4;
    v[[0, 0, 0, 1]] = f64::NAN;
    let paths = npy_files("gpu-errors", &[&q, &k, &v], &["o"]);
    let (a, b, c, o) = (paths[0].as_str(), paths[1].as_str(), paths[2].as_str(), paths[3].as_str());
    let base = ["attend", "--q", a, "--k", b, "--v", c, "--out", o];
    let cases: [(&[&str], &str); 4] = [
        (&["--dtype", "f16"], "error: --dtype: the type the GPU's inputs are rounded to; it needs --device gpu"),
        (&["--check"], "error: --check: compares the GPU's result with the reference; it needs --device gpu"),
        (
            &["--device", "gpu", "--ring", "2"],
            "error: --ring: simulated ranks run the CPU reference; with --device gpu",
        ),
        (
            &["--device", "gpu", "--dtype", "f16"],
            "error: q: value 70000 at [0, 3, 0, 5] exceeds f16's largest finite value (65504); use --dtype bf16",
        ),
    ];
    for (extra, message) in cases {
        let (_, stderr, code) = ringdil(&[&base[..], extra].concat());
        assert_eq!(code, 2, "{extra:?}: {stderr}");
        assert!(stderr.starts_with(message), "{extra:?}: {stderr}");
    }
    // In bf16 70000 is representable; the NaN in v is next.
    let (_, stderr, code) = ringdil(&[&base[..], &["--device", "gpu"]].concat());
    assert_eq!((code, stderr.trim()), (2, "error: v: value NaN at [0, 0, 0, 1] is not finite"));
}
