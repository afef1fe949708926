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
    let over =
        RankEnv::from_lookup(env(&[("RINGDIL_RANK", "2"), ("RINGDIL_WORLD", "2"), ("NCCL_COMM_ID", "10.0.0.1:29500")]))
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
    assert_eq!(UniqueId::from_hex("RINGDIL_NCCL_ID_FILE", &id.to_hex()).unwrap(), id);
    let e = UniqueId::from_hex("RINGDIL_NCCL_ID_FILE", "abc").unwrap_err().to_string();
    assert!(e.contains("256 hex digits"), "{e}");
    let e = UniqueId::from_hex("RINGDIL_NCCL_ID_FILE", &"zz".repeat(128)).unwrap_err().to_string();
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

#[test]
fn the_watchdog_timeout_comes_from_the_environment() {
    let base = [("RINGDIL_RANK", "0"), ("RINGDIL_WORLD", "2"), ("RINGDIL_NCCL_ID_FILE", "/tmp/x")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let pairs: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
        RankEnv::from_lookup(env(&pairs))
    };
    let e = with(&[]).unwrap().unwrap();
    assert_eq!(e.timeout, Some(std::time::Duration::from_secs(300)));
    assert_eq!(e.progress_dir, None);
    let e = with(&[("RINGDIL_TIMEOUT_S", "0"), ("RINGDIL_PROGRESS_DIR", "/tmp/x.progress")]).unwrap().unwrap();
    assert_eq!((e.timeout, e.progress_dir.as_deref()), (None, Some(std::path::Path::new("/tmp/x.progress"))));
    assert_eq!(
        with(&[("RINGDIL_TIMEOUT_S", "12.5")]).unwrap().unwrap().timeout,
        Some(std::time::Duration::from_millis(12500))
    );
    let bad = with(&[("RINGDIL_TIMEOUT_S", "soon")]).unwrap_err().to_string();
    assert!(bad.contains("RINGDIL_TIMEOUT_S") && bad.contains("soon"), "{bad}");
    let o = LaunchOptions { nproc: 1, nnodes: 2, node_rank: 1, id_file: Some("/shared/id".into()) };
    let e: HashMap<_, _> = o.env_of(0, std::path::Path::new("/shared/id")).into_iter().collect();
    assert_eq!(e["RINGDIL_PROGRESS_DIR"], "/shared/id.progress");
}

/// Rank 0 plays a watchdog that declared rank 1 stalled and exits 3; rank 1 takes a
/// second to stop by itself: the launcher waits for it and names the suspect.
#[test]
fn after_a_declared_stall_the_launcher_names_the_suspect_and_lets_the_others_stop() {
    let script = r#"if [ "$RINGDIL_RANK" = 0 ]; then
        mkdir -p "$RINGDIL_PROGRESS_DIR/0123456789abcdef" &&
        echo "1 0 2 20.5 20" > "$RINGDIL_PROGRESS_DIR/0123456789abcdef/verdict"; exit 3
    else sleep 1; touch "$RINGDIL_NCCL_ID_FILE.rank1-stopped"; exit 3; fi"#;
    let id = std::env::temp_dir().join(format!("ringdil-stall-test-{}", std::process::id()));
    let opts = LaunchOptions { nproc: 2, nnodes: 1, node_rank: 0, id_file: Some(id.clone()) };
    let start = std::time::Instant::now();
    let e =
        ringdil_cuda::dist::launch(std::path::Path::new("/bin/sh"), &["-c".into(), script.into()], &opts).unwrap_err();
    match &e {
        DistError::WorkerStalled { rank: 0, verdict, .. } => assert_eq!(verdict.suspect, Some(1)),
        e => panic!("{e}"),
    }
    assert!(e.to_string().contains("the progress board says rank 1 stalled (rank 0 waited 20.5 s"), "{e}");
    let stopped = std::path::PathBuf::from(format!("{}.rank1-stopped", id.display()));
    assert!(stopped.exists(), "rank 1 was killed instead of stopping by itself");
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    let _ = std::fs::remove_file(stopped);
    let _ = std::fs::remove_dir_all(ringdil_cuda::dist::launcher::progress_dir(&id));
}

#[test]
fn a_launch_past_its_deadline_is_killed_and_names_a_rank() {
    let start = std::time::Instant::now();
    let e = ringdil_cuda::dist::launch_until(
        std::path::Path::new("/bin/sh"),
        &["-c".into(), "sleep 30".into()],
        &LaunchOptions::local(2),
        Some(std::time::Duration::from_millis(300)),
    )
    .unwrap_err();
    assert!(matches!(&e, DistError::Worker { rank: 0, reason } if reason.contains("still running")), "{e}");
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}
