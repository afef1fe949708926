//! `P` ranks as `P` threads of one process, one GPU each: rank `r` opens device `r`
//! ([`Gpu::on_device`]) and joins the NCCL communicator from its own thread.
//!
//! This is the in-process alternative to [`launch`](super::launch) (one process per
//! GPU): no launcher, no id file, one address space (a debugger or profiler sees every
//! rank). NCCL supports it: the unique id is shared in memory, and every rank calls
//! `ncclCommInitRank` concurrently from its own thread (the call blocks until all ranks
//! joined, which is why a single thread could not do it rank after rank). A thread only
//! ever makes its own GPU's context current (cudarc binds it in `CudaContext::new` and on
//! its calls; [`Communicator::init`] binds it before NCCL), and NCCL allows concurrent
//! calls on communicators of *different* devices, which is what `P` threads on `P` GPUs
//! make. The raw `ncclComm_t` is not `Send`, so each [`Communicator`] is created, used
//! and destroyed on its rank's thread; only the id and the results cross threads.
//!
//! # Failures
//! * Before NCCL init, all threads meet once: rank 0 brings the unique id, and a rank
//!   that could not open its GPU (error or panic: e.g. more threads than devices) makes
//!   every rank stop before `ncclCommInitRank`, which would otherwise wait for it
//!   forever. The error is returned naming the rank.
//! * After init, an error or panic in `f` is caught on its thread and returned as
//!   [`DistError::RankFailed`] / [`DistError::RankPanicked`] naming the rank (the lowest
//!   failing rank when several fail). Its peers may then be blocked inside NCCL waiting
//!   for it, and a thread cannot be cancelled (nor a blocking communicator safely aborted
//!   under another thread's feet). So the calling thread watches: if ranks are still
//!   running [`PEER_GRACE`] after the first failure, it prints the failure to stderr and
//!   **exits the process with status 1**, as the launcher kills the other workers when
//!   one fails. A run without failures is never timed out.
//! * A rank that stalls (its peers wait in a collective) is caught by the watchdogs
//!   ([`super::watchdog`], timeout `RINGDIL_TIMEOUT_S` or [`run_threads_with`]'s): they
//!   share a progress board in memory, abort every rank's communicator and make its NCCL
//!   calls return [`DistError::Stalled`] naming the rank that is behind. A rank stuck
//!   outside NCCL cannot be interrupted; it is left to the supervisor above.

use super::board::ProgressBoard;
use super::comm::{Communicator, UniqueId};
use super::error::{DistError, DistResult};
use super::watchdog::{WatchOptions, timeout_from_env};
use crate::gpu::Gpu;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the other ranks may still run after one failed before the process exits.
pub const PEER_GRACE: Duration = Duration::from_secs(60);

/// Run `f` on `world` ranks, rank `r` on device `r` of this process, each with its
/// communicator; results in rank order. `Ok(None)` when this machine has no CUDA device
/// (the caller reports a skip). See the module docs for what a failing rank does.
/// The watchdogs' timeout is `RINGDIL_TIMEOUT_S`'s (default 300 s, 0 = off).
pub fn run_threads<T: Send>(
    world: usize,
    f: impl Fn(&Gpu, &Communicator) -> DistResult<T> + Sync,
) -> DistResult<Option<Vec<T>>> {
    run_threads_with(world, timeout_from_env()?, f)
}

/// [`run_threads`] with the watchdogs' `timeout` given (`None`: no watchdog).
pub fn run_threads_with<T: Send>(
    world: usize,
    timeout: Option<Duration>,
    f: impl Fn(&Gpu, &Communicator) -> DistResult<T> + Sync,
) -> DistResult<Option<Vec<T>>> {
    if world == 0 {
        return Err(DistError::BadLaunch { what: "threads", value: 0, reason: "at least one thread" });
    }
    let progress = ProgressBoard::memory(world);
    let watch = timeout.map(|timeout| WatchOptions { timeout, board: Some(progress), exit_after: None });
    let (start, board, f, watch) = (&Start::new(world), &Board::new(world), &f, &watch);
    let outcomes = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                s.spawn(move || {
                    let _finished = Finished(board);
                    rank_main(rank, world, start, board, watch.clone(), f)
                })
            })
            .collect();
        board.supervise(PEER_GRACE, |rank, what, running| {
            eprintln!(
                "rank {rank} failed ({what}); {running} rank(s) still running {PEER_GRACE:?} later, most likely blocked in NCCL waiting for it: exiting the process"
            );
            std::process::exit(1);
        });
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| Outcome::Panicked(panic_message(&*p)))).collect()
    });
    collect(outcomes)
}

/// What one rank's thread ended with.
enum Outcome<T> {
    Done(T),
    NoDevice,
    /// Stopped before NCCL init because another rank could not start.
    Stopped,
    Failed(DistError),
    Panicked(String),
}

fn rank_main<T>(
    rank: usize,
    world: usize,
    start: &Start,
    board: &Board,
    watch: Option<WatchOptions>,
    f: &(impl Fn(&Gpu, &Communicator) -> DistResult<T> + Sync),
) -> Outcome<T> {
    let opened = catch_unwind(|| -> DistResult<Option<(Gpu, Option<UniqueId>)>> {
        let Some(gpu) = Gpu::on_device(rank)? else { return Ok(None) };
        let id = if rank == 0 { Some(UniqueId::new()?) } else { None };
        Ok(Some((gpu, id)))
    });
    let (gpu, go) = match opened {
        Ok(Ok(Some((gpu, id)))) => (gpu, start.arrive(Arrival::Ready(id))),
        Ok(Ok(None)) => {
            start.arrive(Arrival::NoDevice);
            return Outcome::NoDevice;
        }
        Ok(Err(e)) => {
            start.arrive(Arrival::Failed);
            return Outcome::Failed(e);
        }
        Err(p) => {
            start.arrive(Arrival::Failed);
            return Outcome::Panicked(panic_message(&*p));
        }
    };
    let id = match go {
        Go::Init(id) => id,
        Go::NoDevice => return Outcome::NoDevice,
        Go::Stop => return Outcome::Stopped,
    };
    let comm = match Communicator::init_watched(&gpu, rank, world, id, watch) {
        Ok(c) => c,
        Err(e) => {
            board.fail(rank, e.to_string());
            return Outcome::Failed(e);
        }
    };
    // The failure is reported before `comm` is dropped: dropping it waits for its
    // stream, which may hold a transfer that never completes.
    match catch_unwind(AssertUnwindSafe(|| f(&gpu, &comm))) {
        Ok(Ok(t)) => Outcome::Done(t),
        Ok(Err(e)) => {
            board.fail(rank, e.to_string());
            Outcome::Failed(e)
        }
        Err(p) => {
            let message = panic_message(&*p);
            board.fail(rank, format!("panic: {message}"));
            Outcome::Panicked(message)
        }
    }
}

/// Results in rank order, or the lowest rank's failure; `None` when there is no device.
fn collect<T>(outcomes: Vec<Outcome<T>>) -> DistResult<Option<Vec<T>>> {
    let world = outcomes.len();
    let mut done = Vec::with_capacity(world);
    for (rank, o) in outcomes.into_iter().enumerate() {
        match o {
            Outcome::Done(t) => done.push(t),
            Outcome::Failed(e) => return Err(DistError::RankFailed { rank, error: Box::new(e) }),
            Outcome::Panicked(message) => return Err(DistError::RankPanicked { rank, message }),
            // Stopped only happens when some rank failed (returned above); NoDevice means
            // the whole process has none.
            Outcome::NoDevice | Outcome::Stopped => {}
        }
    }
    Ok((done.len() == world).then_some(done))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    // A panicking rank never holds these locks while running user code; the state stays valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a rank arrives at the start: ready (rank 0 with the unique id), without a device,
/// or failed.
enum Arrival {
    Ready(Option<UniqueId>),
    NoDevice,
    Failed,
}

/// What every rank does after the start.
#[derive(Debug, PartialEq)]
enum Go {
    Init(UniqueId),
    NoDevice,
    Stop,
}

#[derive(Default)]
struct StartState {
    arrived: usize,
    id: Option<UniqueId>,
    no_device: bool,
    failed: bool,
}

/// The meeting before NCCL init: each rank arrives exactly once (a panic before it is
/// caught and arrives as a failure), and all leave with the same decision.
struct Start {
    world: usize,
    state: Mutex<StartState>,
    all_here: Condvar,
}

impl Start {
    fn new(world: usize) -> Self {
        Start { world, state: Mutex::new(StartState::default()), all_here: Condvar::new() }
    }

    fn arrive(&self, a: Arrival) -> Go {
        let mut s = lock(&self.state);
        match a {
            Arrival::Ready(id) => s.id = s.id.or(id),
            Arrival::NoDevice => s.no_device = true,
            Arrival::Failed => s.failed = true,
        }
        s.arrived += 1;
        self.all_here.notify_all();
        while s.arrived < self.world {
            s = self.all_here.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        match (s.failed, s.no_device, s.id) {
            (true, _, _) | (false, false, None) => Go::Stop,
            (false, true, _) => Go::NoDevice,
            (false, false, Some(id)) => Go::Init(id),
        }
    }
}

#[derive(Default)]
struct BoardState {
    finished: usize,
    /// The first failing rank, what failed, and when.
    first_failure: Option<(usize, String, Instant)>,
}

/// Where ranks report failures and their end, watched by the calling thread.
struct Board {
    world: usize,
    state: Mutex<BoardState>,
    changed: Condvar,
}

/// Counts a rank as finished when its thread ends, whatever way it ends.
struct Finished<'a>(&'a Board);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).finished += 1;
        self.0.changed.notify_all();
    }
}

impl Board {
    fn new(world: usize) -> Self {
        Board { world, state: Mutex::new(BoardState::default()), changed: Condvar::new() }
    }

    fn fail(&self, rank: usize, what: String) {
        let mut s = lock(&self.state);
        if s.first_failure.is_none() {
            s.first_failure = Some((rank, what, Instant::now()));
        }
        self.changed.notify_all();
    }

    /// Wait until every rank finished. If ranks are still running `grace` after the first
    /// failure, call `stuck(rank, what, running)` once and return.
    fn supervise(&self, grace: Duration, stuck: impl FnOnce(usize, &str, usize)) {
        let mut s = lock(&self.state);
        while s.finished < self.world {
            let Some((rank, what, at)) = &s.first_failure else {
                s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let left = grace.saturating_sub(at.elapsed());
            if left.is_zero() {
                let (rank, what, running) = (*rank, what.clone(), self.world - s.finished);
                drop(s);
                stuck(rank, &what, running);
                return;
            }
            s = self.changed.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn id(b: u8) -> UniqueId {
        UniqueId([b; 128])
    }

    /// Every rank arrives from its own thread; the decisions, in rank order.
    fn meet(arrivals: Vec<Arrival>) -> Vec<Go> {
        let start = Start::new(arrivals.len());
        std::thread::scope(|s| {
            let hs: Vec<_> = arrivals.into_iter().map(|a| s.spawn(|| start.arrive(a))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn the_start_shares_rank_zeros_id_or_stops_everyone() {
        assert_eq!(
            meet(vec![Arrival::Ready(Some(id(7))), Arrival::Ready(None), Arrival::Ready(None)]),
            [Go::Init(id(7)), Go::Init(id(7)), Go::Init(id(7))]
        );
        assert_eq!(meet(vec![Arrival::Ready(Some(id(7))), Arrival::Failed]), [Go::Stop, Go::Stop]);
        assert_eq!(meet(vec![Arrival::NoDevice, Arrival::NoDevice]), [Go::NoDevice, Go::NoDevice]);
        assert_eq!(meet(vec![Arrival::NoDevice, Arrival::Failed]), [Go::Stop, Go::Stop]);
    }

    #[test]
    fn results_come_in_rank_order_and_the_lowest_failure_wins() {
        assert_eq!(collect(vec![Outcome::Done(0), Outcome::Done(1)]).unwrap(), Some(vec![0, 1]));
        assert_eq!(collect::<u8>(vec![Outcome::NoDevice, Outcome::NoDevice]).unwrap(), None);
        let e = collect(vec![
            Outcome::Done(0),
            Outcome::Stopped,
            Outcome::Panicked("boom".into()),
            Outcome::Failed(DistError::BackwardBeforeForward),
        ])
        .unwrap_err();
        assert!(matches!(&e, DistError::RankPanicked { rank: 2, message } if message == "boom"), "{e}");
        let e = collect::<u8>(vec![Outcome::Stopped, Outcome::Failed(DistError::BackwardBeforeForward)]).unwrap_err();
        assert_eq!(e.to_string(), "rank 1: backward called before forward");
    }

    #[test]
    fn the_watchdog_waits_for_all_and_fires_only_after_a_failure_and_the_grace() {
        let board = Board::new(2);
        let fired = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let _f = Finished(&board);
                    std::thread::sleep(Duration::from_millis(50));
                });
            }
            // No failure: slow ranks are waited for, however long the grace is short.
            board.supervise(Duration::from_millis(1), |_, _, _| fired.store(true, Ordering::SeqCst));
        });
        assert!(!fired.load(Ordering::SeqCst));

        let board = Board::new(2);
        let release = AtomicBool::new(false);
        let mut seen = None;
        std::thread::scope(|s| {
            s.spawn(|| {
                let _f = Finished(&board);
                board.fail(0, "gone".into());
            });
            s.spawn(|| {
                let _f = Finished(&board);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            board.supervise(Duration::from_millis(20), |rank, what, running| {
                seen = Some((rank, what.to_string(), running))
            });
            release.store(true, Ordering::SeqCst);
        });
        assert_eq!(seen, Some((0, "gone".to_string(), 1)));
    }

    #[test]
    fn a_panic_message_is_kept() {
        let p = catch_unwind(|| panic!("rank {} broke", 3)).unwrap_err();
        assert_eq!(panic_message(&*p), "rank 3 broke");
        let p = catch_unwind(|| std::panic::panic_any(5u8)).unwrap_err();
        assert_eq!(panic_message(&*p), "(no message)");
    }
}
