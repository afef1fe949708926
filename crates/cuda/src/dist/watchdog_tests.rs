//! Host tests of the watchdog: stand-in markers and communicators, real threads and
//! clocks (timeouts of 100 ms).

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize};

/// A marker that completes when its flag is set.
struct Flag(Arc<AtomicBool>);

impl Marker for Flag {
    fn complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A communicator that counts its aborts and may report an async error.
struct Fake {
    aborts: Arc<AtomicUsize>,
    error: Option<String>,
}

impl Abortable for Fake {
    fn abort(&mut self) {
        self.aborts.fetch_add(1, Ordering::SeqCst);
    }
    fn async_error(&self) -> Option<String> {
        self.error.clone()
    }
}

const TIMEOUT: Duration = Duration::from_millis(100);

fn options(board: &ProgressBoard) -> WatchOptions {
    WatchOptions { timeout: TIMEOUT, board: Some(board.clone()), exit_after: None }
}

/// Wait until `w` trips (at most `limit`); how long it took.
fn tripped_within(w: &Watch, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if w.check().is_err() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn a_rank_that_never_arrives_is_named_by_every_rank_and_the_communicators_are_aborted() {
    let board = ProgressBoard::memory(3);
    let aborts = Arc::new(AtomicUsize::new(0));
    let dogs: Vec<Watchdog> = (0..3).map(|r| Watch::start(r, options(&board))).collect();
    let ids: Vec<usize> =
        dogs.iter().map(|d| d.watch().register(Box::new(Fake { aborts: aborts.clone(), error: None }))).collect();
    // Ranks 0 and 2 complete one operation and wait in a second one; rank 1 never enters.
    for r in [0, 2] {
        let w = dogs[r].watch();
        w.enter().unwrap().enqueued(Box::new(Flag(Arc::new(AtomicBool::new(true)))));
        w.enter().unwrap().enqueued(Box::new(Flag(Arc::new(AtomicBool::new(false)))));
    }
    for d in &dogs {
        let took = tripped_within(d.watch(), Duration::from_secs(5)).expect("the watchdog fires");
        assert!(took < Duration::from_secs(2), "tripped after {took:?}");
    }
    let started = Instant::now();
    for (r, d) in dogs.iter().enumerate() {
        match d.watch().check().unwrap_err() {
            DistError::Stalled { rank, suspect, op, waited_s, timeout_s, .. } => {
                assert_eq!((rank, suspect, op), (r, Some(1), 2));
                assert!(waited_s >= 0.1 && timeout_s == 0.1, "{waited_s} {timeout_s}");
            }
            e => panic!("rank {r}: {e}"),
        }
        // A tripped rank starts no new operation.
        assert!(matches!(d.watch().enter().err(), Some(DistError::Stalled { suspect: Some(1), .. })));
    }
    // Each rank aborts its communicator once; NCCL freed them, so nobody destroys them.
    while aborts.load(Ordering::SeqCst) < 3 && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(aborts.load(Ordering::SeqCst), 3);
    for (d, id) in dogs.iter().zip(ids) {
        assert!(!d.watch().forget(id));
    }
    assert_eq!(board.verdict().unwrap().suspect, Some(1));
    assert_eq!(board.read()[1].map(|p| (p.entered, p.completed)), Some((0, 0)));
}

#[test]
fn completed_and_abandoned_operations_never_trip() {
    let board = ProgressBoard::memory(1);
    let dog = Watch::start(0, options(&board));
    let w = dog.watch();
    let aborts = Arc::new(AtomicUsize::new(0));
    let id = w.register(Box::new(Fake { aborts: aborts.clone(), error: None }));
    let done = Arc::new(AtomicBool::new(false));
    w.enter().unwrap().enqueued(Box::new(Flag(done.clone())));
    drop(w.enter().unwrap()); // the enqueue failed: not watched
    std::thread::sleep(TIMEOUT / 2);
    done.store(true, Ordering::SeqCst); // completes before the timeout
    assert_eq!(tripped_within(w, TIMEOUT * 4), None);
    assert_eq!(aborts.load(Ordering::SeqCst), 0);
    let p = board.read()[0].unwrap();
    assert_eq!((p.entered, p.completed), (2, 1));
    assert!(w.forget(id), "not aborted: the owner destroys it");
    drop(dog); // stops and joins the thread
}

#[test]
fn a_wait_where_no_rank_is_behind_names_no_suspect() {
    let board = ProgressBoard::memory(2);
    let dogs: Vec<Watchdog> = (0..2).map(|r| Watch::start(r, options(&board))).collect();
    for d in &dogs {
        d.watch().enter().unwrap().enqueued(Box::new(Flag(Arc::new(AtomicBool::new(false)))));
    }
    tripped_within(dogs[0].watch(), Duration::from_secs(5)).expect("fires");
    let e = dogs[0].watch().check().unwrap_err();
    assert!(matches!(e, DistError::Stalled { suspect: None, op: 1, .. }), "{e}");
    assert!(e.to_string().contains("no rank is behind"), "{e}");
}

#[test]
fn an_async_nccl_error_trips_at_once() {
    let dog = Watch::start(4, WatchOptions { timeout: Duration::from_secs(3600), board: None, exit_after: None });
    let aborts = Arc::new(AtomicUsize::new(0));
    dog.watch().register(Box::new(Fake { aborts: aborts.clone(), error: Some("ncclRemoteError".into()) }));
    tripped_within(dog.watch(), Duration::from_secs(5)).expect("fires");
    let e = dog.watch().check().unwrap_err();
    assert_eq!(e.to_string(), "NCCL ncclCommGetAsyncError failed: ncclRemoteError");
}

#[test]
fn the_timeout_parses_seconds_and_zero_turns_it_off() {
    assert_eq!(parse_timeout(TIMEOUT_VAR, "0").unwrap(), None);
    assert_eq!(parse_timeout(TIMEOUT_VAR, " 20 ").unwrap(), Some(Duration::from_secs(20)));
    assert_eq!(parse_timeout(TIMEOUT_VAR, "0.25").unwrap(), Some(Duration::from_millis(250)));
    for bad in ["-1", "abc", "inf", "NaN", ""] {
        let e = parse_timeout(TIMEOUT_VAR, bad).unwrap_err().to_string();
        assert!(e.starts_with(&format!("environment variable RINGDIL_TIMEOUT_S=\"{bad}\"")), "{e}");
    }
    assert_eq!(poll_interval(Duration::from_secs(300)), Duration::from_millis(500));
    assert_eq!(poll_interval(Duration::from_secs(1)), Duration::from_millis(50));
    assert_eq!(poll_interval(Duration::from_millis(20)), Duration::from_millis(5));
}

#[test]
fn the_stall_error_names_the_ranks_the_operation_and_the_timeout() {
    let e = DistError::Stalled { rank: 0, suspect: Some(1), detector: 2, op: 7, waited_s: 20.04, timeout_s: 20.0 };
    assert_eq!(
        e.to_string(),
        "rank 0: stalled: rank 1 is behind (it entered fewer collectives than its peers); rank 2 waited 20.0 s in its collective 7, timeout 20 s (RINGDIL_TIMEOUT_S); communicator aborted"
    );
}
