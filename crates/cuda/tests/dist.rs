//! Host-side tests of the distributed runtime (no GPU needed). The virtual-rank run on a
//! GPU is in `tests/gpu.rs`, whose harness reports it as skipped without a device.

use ringdil_cuda::dist::comm::UniqueId;
use ringdil_cuda::dist::launcher::device_for;
use ringdil_cuda::dist::{DistError, LaunchOptions, RankEnv, run_threads};
use ringdil_cuda::{CudaError, Gpu};
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

#[test]
fn rank_env_is_read_and_checked() {
    assert_eq!(RankEnv::from_lookup(env(&[])).unwrap(), None);
    let e =
        RankEnv::from_lookup(env(&[("RINGDIL_RANK", "1"), ("RINGDIL_WORLD", "2"), ("RINGDIL_NCCL_ID_FILE", "/tmp/x")]))
            .unwrap()
            .unwrap();
    assert_eq!((e.rank, e.local_rank, e.world), (1, 1, 2));
    let bad = RankEnv::from_lookup(env(&[("RINGDIL_RANK", "two"), ("RINGDIL_WORLD", "2")])).unwrap_err().to_string();
    assert!(bad.contains("RINGDIL_RANK") && bad.contains("two"), "{bad}");
    let over = RankEnv::from_lookup(env(&[("RINGDIL_RANK", "2"), ("RINGDIL_WORLD", "2"), ("RINGDIL_NCCL_ID", "00")]))
        .unwrap_err();
    assert!(matches!(over, DistError::BadRank { rank: 2, world: 2 }), "{over}");
    let no_id = RankEnv::from_lookup(env(&[("RINGDIL_RANK", "0"), ("RINGDIL_WORLD", "1")])).unwrap_err().to_string();
    assert!(no_id.contains("RINGDIL_NCCL_ID_FILE"), "{no_id}");
}

#[test]
fn unique_id_hex_round_trip_and_errors() {
    let mut raw = [0u8; 128];
    raw.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 7) as u8);
    let id = UniqueId(raw);
    assert_eq!(UniqueId::from_hex("RINGDIL_NCCL_ID", &id.to_hex()).unwrap(), id);
    let e = UniqueId::from_hex("RINGDIL_NCCL_ID", "abc").unwrap_err().to_string();
    assert!(e.contains("256 hex digits"), "{e}");
    let e = UniqueId::from_hex("RINGDIL_NCCL_ID", &"zz".repeat(128)).unwrap_err().to_string();
    assert!(e.contains("not hexadecimal"), "{e}");
}

#[test]
fn launch_options_are_validated_and_give_each_rank_its_env() {
    assert!(matches!(LaunchOptions::local(0).validate(), Err(DistError::BadLaunch { what: "nproc", value: 0, .. })));
    let o = LaunchOptions { nproc: 2, nnodes: 2, node_rank: 2, id_file: Some("/shared/id".into()) };
    assert!(matches!(o.validate(), Err(DistError::BadLaunch { what: "node_rank", value: 2, .. })));
    let o = LaunchOptions { nproc: 4, nnodes: 2, node_rank: 1, id_file: Some("/shared/id".into()) };
    o.validate().unwrap();
    let e: HashMap<_, _> = o.env_of(3, std::path::Path::new("/shared/id")).into_iter().collect();
    assert_eq!(e["RINGDIL_RANK"], "7");
    assert_eq!(e["RINGDIL_LOCAL_RANK"], "3");
    assert_eq!(e["RINGDIL_WORLD"], "8");
    assert_eq!(device_for(1, Some("4,5")), "5");
    assert_eq!(device_for(1, None), "1");
}

#[test]
fn a_failing_worker_is_reported_with_its_rank() {
    let e = ringdil_cuda::dist::launch(
        std::path::Path::new("/bin/sh"),
        &["-c".into(), "exit $RINGDIL_RANK".into()],
        &LaunchOptions::local(2),
    )
    .unwrap_err();
    assert!(matches!(e, DistError::Worker { rank: 1, .. }), "{e}");
    ringdil_cuda::dist::launch(
        std::path::Path::new("/bin/sh"),
        &["-c".into(), "test -n \"$RINGDIL_NCCL_ID_FILE\"".into()],
        &LaunchOptions::local(3),
    )
    .unwrap();
}

/// Without CUDA these are the "no device" answers; on a GPU machine, the real ones.
#[test]
fn devices_by_ordinal_and_threads_of_one_process() {
    let no_cuda = Gpu::probe().unwrap().is_none();
    match Gpu::on_device(usize::MAX) {
        Ok(None) => assert!(no_cuda),
        Err(CudaError::NoSuchDevice { ordinal: usize::MAX, count }) => assert!(!no_cuda && count > 0),
        other => panic!("device usize::MAX: {:?}", other.map(|g| g.is_some())),
    }
    let e = run_threads(0, |_, c| Ok(c.rank())).unwrap_err();
    assert!(matches!(e, DistError::BadLaunch { what: "threads", value: 0, .. }), "{e}");
    let ranks = run_threads(1, |_, c| Ok((c.rank(), c.world()))).unwrap();
    assert_eq!(ranks, if no_cuda { None } else { Some(vec![(0, 1)]) });
}
