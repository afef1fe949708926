//! The NCCL communicator of one rank (one process per GPU), on its own stream.
//!
//! Transfers run on a **communication stream**, created non-blocking so it never
//! serialises with the compute stream of [`Gpu`]. Ordering between the two streams comes
//! from cudarc's per-buffer events: a send waits for the last write of its buffer (the
//! kernel that produced it), a kernel that reads a received buffer waits for the receive,
//! and a freed buffer waits for every reader. The guards that record those events are
//! dropped only after `ncclGroupEnd`, when the transfers are really enqueued.
//!
//! With one process per GPU, each process sees one GPU (the launcher sets
//! `CUDA_VISIBLE_DEVICES`), so device 0 of [`Gpu::probe`] is this rank's GPU and the same
//! code runs on one host or many; the unique id comes from rank 0 through a file (or the
//! `NCCL_COMM_ID` address): see [`super::launcher`]. With one thread per GPU
//! ([`super::threads`]) each thread opens device `rank` and the id is shared in memory.
//!
//! A `Communicator` holds a raw `ncclComm_t` and is neither `Send` nor `Sync`: it lives
//! and dies on the thread that created it, whose current CUDA context is its GPU's
//! (bound by [`Communicator::init`] and [`Communicator::split`]).
//!
//! A communicator made by [`Communicator::init_watched`] has a watchdog
//! ([`super::watchdog`]): each collective is marked on entry and by an event once
//! enqueued, and when one waits past the timeout the watchdog aborts the communicator;
//! from then on every call returns [`DistError::Stalled`] without touching NCCL (the
//! aborted communicator is freed). Split communicators share their parent's watchdog.

use super::error::{DistError, DistResult};
use super::watchdog::{Abortable, Marker, Watch, WatchOptions, Watchdog};
use crate::gpu::Gpu;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use cudarc::nccl::{result, sys};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Element types moved by NCCL: the bits travel unchanged.
pub trait Wire: DeviceRepr {
    const TYPE: sys::ncclDataType_t;
}

impl Wire for u16 {
    // bf16/f16 bits: the type only sizes the message (send/recv never does arithmetic).
    const TYPE: sys::ncclDataType_t = sys::ncclDataType_t::ncclBfloat16;
}

impl Wire for f32 {
    const TYPE: sys::ncclDataType_t = sys::ncclDataType_t::ncclFloat32;
}

fn nccl(call: &'static str, r: Result<result::NcclStatus, result::NcclError>) -> DistResult<()> {
    r.map(|_| ()).map_err(|e| DistError::Nccl { call, code: format!("{:?}", e.0) })
}

/// An NCCL unique id: 128 bytes that rank 0 creates and every rank must receive.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId({}...)", &self.to_hex()[..16])
    }
}

impl UniqueId {
    /// A fresh id (rank 0 only). Needs libnccl.
    pub fn new() -> DistResult<Self> {
        let id = result::get_uniqueid()
            .map_err(|e| DistError::Nccl { call: "ncclGetUniqueId", code: format!("{:?}", e.0) })?;
        Ok(UniqueId(id.internal.map(|c| c as u8)))
    }

    /// 256 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse [`UniqueId::to_hex`]; `var` names where the text came from, for the error.
    pub fn from_hex(var: &'static str, text: &str) -> DistResult<Self> {
        let t = text.trim();
        let bad = |reason| DistError::Env { var, value: t.chars().take(40).collect(), reason };
        if t.len() != 256 {
            return Err(bad("an NCCL id is 256 hex digits"));
        }
        let mut id = [0u8; 128];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).map_err(|_| bad("not hexadecimal"))?;
        }
        Ok(UniqueId(id))
    }
}

/// One rank's NCCL communicator and its communication stream.
pub struct Communicator {
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    stream: Arc<CudaStream>,
    watched: Option<Watched>,
    /// Communicators split from this one and kept ([`Communicator::split_kept`]), by
    /// partition name.
    /// In the order they were made, which every rank shares (a split is collective), so
    /// that every rank destroys them in the same order (reversed) as well.
    kept: RefCell<Vec<(String, Rc<Communicator>)>>,
}

/// The watch over a communicator: its registration, and (on the communicator that
/// started it) the watchdog thread.
struct Watched {
    watch: Arc<Watch>,
    id: usize,
    _dog: Option<Watchdog>,
}

/// The raw handle, for the watchdog thread: `ncclCommAbort` and `ncclCommGetAsyncError`
/// are the calls NCCL allows from another thread while the owner may be blocked in it.
struct RawComm(sys::ncclComm_t);

// SAFETY: only the two calls above are made through it, from the watchdog thread.
unsafe impl Send for RawComm {}

impl Abortable for RawComm {
    fn abort(&mut self) {
        // SAFETY: the communicator is live: its owner forgets it before destroying it.
        let _ = unsafe { sys::ncclCommAbort(self.0) };
    }

    fn async_error(&self) -> Option<String> {
        use sys::ncclResult_t::{ncclInProgress, ncclSuccess};
        let mut r = ncclSuccess;
        // SAFETY: as above; `r` is a valid out-pointer.
        let status = unsafe { sys::ncclCommGetAsyncError(self.0, &mut r) };
        (status == ncclSuccess && r != ncclSuccess && r != ncclInProgress).then(|| format!("{r:?}"))
    }
}

/// The mark of a blocking host call that has returned.
struct Returned;

impl Marker for Returned {
    fn complete(&self) -> bool {
        true
    }
}

impl Communicator {
    /// Join the communicator `id` as `rank` of `world` on `gpu` (collective: every rank
    /// must call it).
    pub fn init(gpu: &Gpu, rank: usize, world: usize, id: UniqueId) -> DistResult<Self> {
        Self::init_watched(gpu, rank, world, id, None)
    }

    /// [`Communicator::init`], with a watchdog when `watch` is given (see the module docs).
    pub fn init_watched(
        gpu: &Gpu,
        rank: usize,
        world: usize,
        id: UniqueId,
        watch: Option<WatchOptions>,
    ) -> DistResult<Self> {
        if rank >= world {
            return Err(DistError::BadRank { rank, world });
        }
        gpu.context().bind_to_thread()?;
        let stream = gpu.context().new_stream()?;
        let mut comm = std::ptr::null_mut();
        let raw = sys::ncclUniqueId { internal: id.0.map(|b| b as std::ffi::c_char) };
        // SAFETY: `comm` is a valid out-pointer; the device is bound to this thread.
        nccl("ncclCommInitRank", unsafe { result::comm_init_rank(&mut comm, world as i32, raw, rank as i32) })?;
        let watched = watch.map(|opts| {
            let dog = Watch::start(rank, opts);
            let watch = dog.watch().clone();
            Watched { id: watch.register(Box::new(RawComm(comm))), watch, _dog: Some(dog) }
        });
        Ok(Communicator { comm, rank, world, stream, watched, kept: RefCell::default() })
    }

    /// Split this communicator (collective: every rank of it must call, concurrently):
    /// ranks with the same `color` form one new communicator, ordered by `key` (ties by
    /// rank here). The new one has its own communication stream on `gpu`, which must be
    /// the GPU this communicator was created on. The 2-D layout ([`super::grid`]) splits
    /// the world into rings with `color = ring`, `key = position`.
    ///
    /// cudarc 0.19 exposes `result::comm_split` only for CUDA 12.2-12.5 builds, so this
    /// calls `sys::ncclCommSplit` directly, with a NULL config: the child inherits the
    /// parent's configuration (`nccl.h`).
    pub fn split(&self, gpu: &Gpu, color: usize, key: usize) -> DistResult<Communicator> {
        let int = |what, value: usize| i32::try_from(value).map_err(|_| DistError::BadSplit { what, value });
        let (c, k) = (int("color", color)?, int("key", key)?);
        let op = self.enter()?;
        gpu.context().bind_to_thread()?;
        let stream = gpu.context().new_stream()?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `self.comm` is live, `comm` a valid out-pointer, NULL config is allowed;
        // `c >= 0`, so this rank gets a communicator (not NCCL_SPLIT_NOCOLOR).
        let split = unsafe { sys::ncclCommSplit(self.comm, c, k, &mut comm, std::ptr::null_mut()) }.result();
        self.check()?;
        nccl("ncclCommSplit", split)?;
        if let Some(op) = op {
            op.enqueued(Box::new(Returned));
        }
        // SAFETY: `comm` was just created.
        let rank = unsafe { result::comm_user_rank(comm) };
        // SAFETY: as above.
        let world = unsafe { result::comm_count(comm) };
        let (rank, world) = match (rank, world) {
            (Ok(r), Ok(w)) => (r as usize, w as usize),
            (Err(e), _) | (_, Err(e)) => {
                // SAFETY: created above, nothing enqueued on it.
                let _ = unsafe { result::comm_destroy(comm) };
                return Err(DistError::Nccl { call: "ncclCommUserRank/ncclCommCount", code: format!("{:?}", e.0) });
            }
        };
        let watched = self.watched.as_ref().map(|w| Watched {
            watch: w.watch.clone(),
            id: w.watch.register(Box::new(RawComm(comm))),
            _dog: None,
        });
        Ok(Communicator { comm, rank, world, stream, watched, kept: RefCell::default() })
    }

    /// [`Communicator::split`] into the partition named `partition` (every rank passes
    /// the same name for the same partition, with its own `color` and `key`), made on the
    /// first call with that name and kept with this communicator: a split is a whole NCCL
    /// initialisation (about a second here), so a schedule that builds its rank state per
    /// call (the hybrid's groups and rings) reuses it. Collective on the first call of a
    /// name, like `split`: every rank asks for the same names in the same order.
    pub fn split_kept(&self, gpu: &Gpu, partition: &str, color: usize, key: usize) -> DistResult<Rc<Communicator>> {
        if let Some((_, c)) = self.kept.borrow().iter().find(|(name, _)| name == partition) {
            return Ok(c.clone());
        }
        let c = Rc::new(self.split(gpu, color, key)?);
        self.kept.borrow_mut().push((partition.to_string(), c.clone()));
        Ok(c)
    }

    /// `Err` ([`DistError::Stalled`], or NCCL's asynchronous error) once this rank's
    /// watchdog fired; `Ok` otherwise and without a watchdog. A rank that is busy outside
    /// NCCL may call it to give up early.
    pub fn check(&self) -> DistResult<()> {
        self.watched.as_ref().map_or(Ok(()), |w| w.watch.check())
    }

    /// Mark a collective as started (`None`: not watched).
    fn enter(&self) -> DistResult<Option<super::watchdog::Op<'_>>> {
        self.watched.as_ref().map(|w| w.watch.enter()).transpose()
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// The communication stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// One NCCL group of sends `(peer, buffer)` and receives `(peer, buffer)`, enqueued on
    /// the communication stream. Matching is by order per peer pair, as in NCCL.
    pub fn exchange<T: Wire>(
        &self,
        sends: &[(usize, &CudaSlice<T>)],
        recvs: &mut [(usize, &mut CudaSlice<T>)],
    ) -> DistResult<()> {
        let st = &self.stream;
        let op = self.enter()?;
        let mut guards = Vec::with_capacity(sends.len() + recvs.len());
        let mut ops: Vec<(bool, u64, usize, usize)> = Vec::with_capacity(sends.len() + recvs.len());
        for (peer, buf) in sends {
            let (ptr, g) = buf.device_ptr(st);
            ops.push((true, ptr, buf.len(), *peer));
            guards.push(g);
        }
        for (peer, buf) in recvs.iter_mut() {
            let len = buf.len();
            let (ptr, g) = buf.device_ptr_mut(st);
            ops.push((false, ptr, len, *peer));
            guards.push(g);
        }
        nccl("ncclGroupStart", result::group_start())?;
        let mut status = Ok(());
        for (send, ptr, len, peer) in ops {
            let s = st.cu_stream() as sys::cudaStream_t;
            // SAFETY: pointers and lengths come from live buffers held by `guards`.
            let r = unsafe {
                if send {
                    result::send(ptr as *const _, len, T::TYPE, peer as i32, self.comm, s)
                } else {
                    result::recv(ptr as *mut _, len, T::TYPE, peer as i32, self.comm, s)
                }
            };
            if status.is_ok() {
                status = nccl(if send { "ncclSend" } else { "ncclRecv" }, r);
            }
        }
        let end = result::group_end();
        self.check()?;
        nccl("ncclGroupEnd", end)?;
        drop(guards);
        if let (Some(op), Ok(())) = (op, &status) {
            op.enqueued(Box::new(st.record_event(None)?));
        }
        status
    }

    /// Every rank waits here until all have arrived (an all-reduce of one value), and
    /// both streams of this rank are drained.
    pub fn barrier(&self, gpu: &Gpu) -> DistResult<()> {
        gpu.synchronize()?;
        self.sum_f32(&[0.0])?;
        Ok(())
    }

    /// Rank `root`'s `values` on every rank (collective: every rank passes a slice of the
    /// same length; only the root's contents matter). Used to make a decision once, e.g.
    /// the auto schedule from rank 0's measured speeds, so that all ranks agree on it.
    pub fn broadcast_f64(&self, root: usize, values: &[f64]) -> DistResult<Vec<f64>> {
        if root >= self.world {
            return Err(DistError::BadRank { rank: root, world: self.world });
        }
        // A sum where only the root contributes: exact for f64 sent as hi + lo f32 parts.
        let mine = self.rank == root;
        let parts: Vec<f32> = values
            .iter()
            .flat_map(|&v| {
                let hi = v as f32;
                let lo = (v - hi as f64) as f32;
                if mine { [hi, lo] } else { [0.0, 0.0] }
            })
            .collect();
        let sum = self.sum_f32(&parts)?;
        Ok(sum.chunks(2).map(|c| c[0] as f64 + c[1] as f64).collect())
    }

    /// The element-wise sum over ranks of `values`, on every rank (blocking).
    fn sum_f32(&self, values: &[f32]) -> DistResult<Vec<f32>> {
        let mut x = self.stream.clone_htod(values)?;
        let op = self.enter()?;
        {
            let (p, _g) = x.device_ptr_mut(&self.stream);
            // SAFETY: in-place all-reduce of a live buffer of `values.len()` f32.
            nccl("ncclAllReduce", unsafe {
                result::all_reduce(
                    p as *const _,
                    p as *mut _,
                    values.len(),
                    sys::ncclDataType_t::ncclFloat32,
                    sys::ncclRedOp_t::ncclSum,
                    self.comm,
                    self.stream.cu_stream() as _,
                )
            })?;
        }
        if let Some(op) = op {
            op.enqueued(Box::new(self.stream.record_event(None)?));
        }
        // The host waits here; an abort by the watchdog ends the wait.
        let out = self.stream.clone_dtoh(&x);
        self.check()?;
        let out = out?;
        self.stream.synchronize()?;
        Ok(out)
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Kept splits go first (a caller's clone keeps its own alive), newest first: the
        // same order on every rank. NCCL finalizes a communicator as it destroys it, which
        // may wait for the communicator's other ranks; two ranks destroying two shared
        // splits in opposite orders could then wait for each other for ever.
        let mut kept = self.kept.borrow_mut();
        while kept.pop().is_some() {}
        drop(kept);
        // A tripped rank's stream may hold an aborted transfer: no waiting for it.
        if self.check().is_ok() {
            let _ = self.stream.synchronize();
        }
        // The watchdog frees nothing now; if it aborted the communicator, NCCL freed it.
        if self.watched.as_ref().is_none_or(|w| w.watch.forget(w.id)) {
            // SAFETY: the communicator is live and no operation is pending on its stream.
            let _ = unsafe { result::comm_destroy(self.comm) };
        }
    }
}
