//! The progress board: how far each rank got, and the verdict once a watchdog fired.
//!
//! Every rank's watchdog ([`super::watchdog`]) posts its rank's [`Progress`] (collective
//! operations entered and completed, and when that last changed) and reads the others'.
//! When one rank's operation has waited past the timeout, its watchdog declares a
//! [`Verdict`] naming the [`suspect`]: the rank that entered the fewest operations, i.e.
//! the one the others are waiting for. The first verdict stands, and every rank that
//! sees it stops with the same suspect, so all ranks' errors name the same rank.
//!
//! Two stores: shared memory for the threads of one process
//! ([`run_threads`](super::run_threads)), and small files in a directory for one process
//! per GPU (the launcher makes one next to the id file and passes it as
//! `RINGDIL_PROGRESS_DIR`; on a shared filesystem it spans hosts). A file is replaced
//! atomically (written aside, then renamed), and the verdict is created by a hard link,
//! which fails when one exists: the first declaration wins without a lock.
//! Only the watchdog threads touch the board, never the ring's own path.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How far one rank got: collective operations entered and completed, and the time
/// (milliseconds since the Unix epoch) of its last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub entered: u64,
    pub completed: u64,
    pub at_ms: u64,
}

/// What the first watchdog that fired found: the suspect, which rank detected it, the
/// operation (1-based count of that rank's collectives) it waited in, for how long, and
/// the timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub suspect: Option<usize>,
    pub detector: usize,
    pub op: u64,
    pub waited_s: f64,
    pub timeout_s: f64,
}

impl Verdict {
    fn to_line(&self) -> String {
        let s = self.suspect.map_or("-".to_string(), |s| s.to_string());
        format!("{s} {} {} {} {}\n", self.detector, self.op, self.waited_s, self.timeout_s)
    }

    fn parse(line: &str) -> Option<Verdict> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [s, d, op, waited, timeout] = w[..] else { return None };
        Some(Verdict {
            suspect: if s == "-" { None } else { Some(s.parse().ok()?) },
            detector: d.parse().ok()?,
            op: op.parse().ok()?,
            waited_s: waited.parse().ok()?,
            timeout_s: timeout.parse().ok()?,
        })
    }
}

/// The rank the others wait for: among the ranks on the board, the one that entered the
/// fewest operations, when some rank entered more (ties: the oldest last change, then the
/// lowest rank). `None` when every rank on the board entered as many (all wait in the
/// same operation: no rank is behind, e.g. a hung link or a kernel that never ends) or
/// the board is empty.
pub fn suspect(board: &[Option<Progress>]) -> Option<usize> {
    let seen = board.iter().enumerate().filter_map(|(r, p)| p.map(|p| (r, p)));
    let most = seen.clone().map(|(_, p)| p.entered).max()?;
    let (rank, least) = seen.min_by_key(|(r, p)| (p.entered, p.at_ms, *r))?;
    (least.entered < most).then_some(rank)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[derive(Default)]
struct Shared {
    progress: Vec<Option<Progress>>,
    verdict: Option<Verdict>,
}

#[derive(Clone)]
enum Store {
    Memory(Arc<Mutex<Shared>>),
    Files(PathBuf),
}

/// The board of a world of ranks (cheap to clone: clones share it).
#[derive(Clone)]
pub struct ProgressBoard {
    world: usize,
    store: Store,
}

impl std::fmt::Debug for ProgressBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.store {
            Store::Memory(_) => write!(f, "ProgressBoard(memory, {} ranks)", self.world),
            Store::Files(d) => write!(f, "ProgressBoard({}, {} ranks)", d.display(), self.world),
        }
    }
}

impl ProgressBoard {
    /// A board in memory, for ranks that are threads of this process.
    pub fn memory(world: usize) -> Self {
        let shared = Shared { progress: vec![None; world], verdict: None };
        ProgressBoard { world, store: Store::Memory(Arc::new(Mutex::new(shared))) }
    }

    /// A board in directory `dir` (created if missing), for ranks that are processes.
    pub fn files(dir: &Path, world: usize) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(ProgressBoard { world, store: Store::Files(dir.to_path_buf()) })
    }

    pub fn world(&self) -> usize {
        self.world
    }

    fn shared(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Post `rank`'s progress (best effort: a board that cannot be written only loses
    /// the naming of a suspect, never the detection).
    pub fn post(&self, rank: usize, p: Progress) {
        match &self.store {
            Store::Memory(m) => {
                if let Some(slot) = Self::shared(m).progress.get_mut(rank) {
                    *slot = Some(p);
                }
            }
            Store::Files(dir) => {
                let tmp = dir.join(format!(".rank-{rank}.tmp"));
                if std::fs::write(&tmp, format!("{} {} {}\n", p.entered, p.completed, p.at_ms)).is_ok() {
                    let _ = std::fs::rename(&tmp, dir.join(format!("rank-{rank}")));
                }
            }
        }
    }

    /// Every rank's last posted progress (`None`: not posted, or not readable).
    pub fn read(&self) -> Vec<Option<Progress>> {
        match &self.store {
            Store::Memory(m) => Self::shared(m).progress.clone(),
            Store::Files(dir) => (0..self.world)
                .map(|r| {
                    let text = std::fs::read_to_string(dir.join(format!("rank-{r}"))).ok()?;
                    let n: Vec<u64> = text.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
                    let [entered, completed, at_ms] = n[..] else { return None };
                    Some(Progress { entered, completed, at_ms })
                })
                .collect(),
        }
    }

    /// The verdict, if a watchdog declared one.
    pub fn verdict(&self) -> Option<Verdict> {
        match &self.store {
            Store::Memory(m) => Self::shared(m).verdict.clone(),
            Store::Files(dir) => Verdict::parse(&std::fs::read_to_string(dir.join("verdict")).ok()?),
        }
    }

    /// Declare `v` unless a verdict stands already; returns the one that stands.
    pub fn declare(&self, v: Verdict) -> Verdict {
        match &self.store {
            Store::Memory(m) => Self::shared(m).verdict.get_or_insert(v).clone(),
            Store::Files(dir) => {
                let tmp = dir.join(format!(".verdict-{}.tmp", v.detector));
                if std::fs::write(&tmp, v.to_line()).is_ok() {
                    // Fails when a verdict exists: the first one stands.
                    let _ = std::fs::hard_link(&tmp, dir.join("verdict"));
                    let _ = std::fs::remove_file(&tmp);
                }
                self.verdict().unwrap_or(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(entered: u64, completed: u64, at_ms: u64) -> Option<Progress> {
        Some(Progress { entered, completed, at_ms })
    }

    #[test]
    fn the_suspect_is_the_rank_that_entered_fewest_operations() {
        assert_eq!(suspect(&[p(3, 2, 10), p(1, 1, 5), p(3, 2, 10)]), Some(1));
        // Ties among the laggards: the oldest change, then the lowest rank.
        assert_eq!(suspect(&[p(3, 2, 10), p(1, 1, 9), p(1, 1, 4)]), Some(2));
        assert_eq!(suspect(&[p(1, 0, 7), p(1, 0, 7), p(2, 1, 1)]), Some(0));
        // A rank that is not on the board is not named; nobody behind: no suspect.
        assert_eq!(suspect(&[None, p(0, 0, 1), p(2, 1, 1)]), Some(1));
        assert_eq!(suspect(&[p(4, 3, 1), p(4, 3, 9)]), None);
        assert_eq!(suspect(&[None, None]), None);
        assert_eq!(suspect(&[]), None);
    }

    fn check_store(board: &ProgressBoard) {
        assert_eq!(board.read(), vec![None, None, None]);
        board.post(2, Progress { entered: 5, completed: 4, at_ms: 77 });
        board.post(0, Progress { entered: 1, completed: 1, at_ms: 3 });
        board.post(0, Progress { entered: 6, completed: 4, at_ms: 80 });
        assert_eq!(board.read(), vec![p(6, 4, 80), None, p(5, 4, 77)]);
        assert_eq!(board.verdict(), None);
        let first = Verdict { suspect: Some(1), detector: 0, op: 6, waited_s: 20.5, timeout_s: 20.0 };
        let second = Verdict { suspect: None, detector: 2, op: 5, waited_s: 21.0, timeout_s: 20.0 };
        assert_eq!(board.declare(first.clone()), first);
        assert_eq!(board.declare(second), first, "the first verdict stands");
        assert_eq!(board.clone().verdict(), Some(first));
    }

    #[test]
    fn both_stores_keep_progress_and_the_first_verdict() {
        check_store(&ProgressBoard::memory(3));
        let dir = std::env::temp_dir().join(format!("ringdil-board-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        check_store(&ProgressBoard::files(&dir, 3).unwrap());
        // Another process opening the same directory sees the same board.
        let again = ProgressBoard::files(&dir, 3).unwrap();
        assert_eq!(again.read()[2], p(5, 4, 77));
        assert_eq!(again.verdict().unwrap().suspect, Some(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_verdict_without_suspect_survives_the_file() {
        let v = Verdict { suspect: None, detector: 3, op: 2, waited_s: 0.25, timeout_s: 0.2 };
        assert_eq!(Verdict::parse(&v.to_line()), Some(v));
        assert_eq!(Verdict::parse("1 2 3"), None);
    }
}
