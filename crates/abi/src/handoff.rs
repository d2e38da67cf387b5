//! The slot handoff protocol as code: every transition of a slot's `state` word, and the order
//! of the reads and writes around it, for both sides, in one place.
//!
//! The preload (its gate, thread creation, fork and exec) and the scheduler (its `Region`) run
//! these functions on the shared region; `tests/loom_handoff.rs` runs the very same functions on
//! loom's atomics, with a futex modelled on loom's mutex and condition variable, and checks the
//! protocol under the interleavings loom explores. Hence three small traits: [`Word`] (an atomic
//! word: `core`'s or loom's), [`SlotWords`] (a slot's handoff words) and [`Futex`] (the kernel's
//! wait and wake, or loom's model of them). With `core`'s atomics every function here inlines to
//! the loads, stores and futex calls it names: the hot path pays nothing for the abstraction.
//!
//! # Invariants (what the loom test checks)
//!
//! - **One runner.** A thread runs user code only between [`await_grant`] and its next
//!   [`publish`] (or [`finish`]); the scheduler grants only when every claimed slot is
//!   [`Seen::Waiting`] or [`Seen::Exited`], and grants one slot at a time. The grant's Release and
//!   the thread's Acquire, then the thread's next post's Release and the scheduler's Acquire,
//!   chain every runner's writes before the next runner's reads.
//! - **No torn or stale request.** A thread writes `op`, `args` and the post count
//!   ([`write_request`]) before `state := POSTED` (Release); the scheduler reads `state`
//!   (Acquire) before the post count and the request ([`observe`], [`request`]). A new post is
//!   told from the previous one by its count, never by the state alone.
//! - **No lost grant or post.** The scheduler writes `result` and `now_ns` before
//!   `state := GRANTED` (Release) and then wakes the slot's futex; the thread re-reads `state`
//!   (Acquire) after every futex return. A thread bumps the scheduler's wake word after
//!   `state := POSTED` and then wakes it; the scheduler reads the wake word ([`wake_count`])
//!   *before* it scans the slots and sleeps only while the word still holds that value
//!   ([`sleep`]), so a post made during the scan ends the sleep at once.
//! - **Start barrier.** A creator claims a newborn's slot ([`next_free`], then [`claim`]) before
//!   its own next post; the scheduler reads the claimed count ([`claimed`]) after a scan that saw
//!   that post, so it knows the newborn (still `STARTING`, hence busy) before any decision.
//! - **Exit.** A thread's last grant leaves its slot `EXITED` ([`finish`]), and it wakes the
//!   scheduler; an exited slot never posts again.
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{state, Slot};

/// An atomic word of the region: `core`'s atomics in the real code, loom's in its model test.
pub trait Word<T: Copy> {
    fn load(&self, order: Ordering) -> T;
    fn store(&self, value: T, order: Ordering);
    fn fetch_add(&self, value: T, order: Ordering) -> T;
}

impl Word<u32> for AtomicU32 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u32, order: Ordering) {
        AtomicU32::store(self, value, order)
    }
    #[inline(always)]
    fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_add(self, value, order)
    }
}

impl Word<u64> for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline(always)]
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_add(self, value, order)
    }
}

/// The words of a slot the handoff reads and writes (the others, written by the thread while it
/// holds the token, travel with `op` and `args`: they are published by the same Release).
pub trait SlotWords {
    type U32: Word<u32>;
    type U64: Word<u64>;
    /// One of [`state`]; the futex word the thread parks on.
    fn state(&self) -> &Self::U32;
    fn op(&self) -> &Self::U32;
    fn args(&self) -> &[Self::U64; 4];
    /// Posts made so far.
    fn posts(&self) -> &Self::U32;
    fn result(&self) -> &Self::U64;
    fn now_ns(&self) -> &Self::U64;
}

impl SlotWords for Slot {
    type U32 = AtomicU32;
    type U64 = AtomicU64;
    #[inline(always)]
    fn state(&self) -> &AtomicU32 {
        &self.state
    }
    #[inline(always)]
    fn op(&self) -> &AtomicU32 {
        &self.op
    }
    #[inline(always)]
    fn args(&self) -> &[AtomicU64; 4] {
        &self.args
    }
    #[inline(always)]
    fn posts(&self) -> &AtomicU32 {
        &self.posts
    }
    #[inline(always)]
    fn result(&self) -> &AtomicU64 {
        &self.result
    }
    #[inline(always)]
    fn now_ns(&self) -> &AtomicU64 {
        &self.now_ns
    }
}

/// Futex wait and wake on a word of the region (shared between processes, so not private).
pub trait Futex<W: ?Sized> {
    /// Sleeps while `word` holds `expected`, until a wake on it. May return early (a timeout, a
    /// signal, spuriously): every caller here reads the word again after it returns.
    fn wait(&self, word: &W, expected: u32) -> Waited;
    /// Wakes up to `count` waiters on `word`.
    fn wake(&self, word: &W, count: u32);
}

/// How a [`Futex::wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The whole timeout passed.
    TimedOut,
    /// Woken, the word had already changed, or a signal: look again.
    Woken,
}

/// Wakes every waiter (the scheduler's wake word has one, but a waker need not know that).
pub const WAKE_ALL: u32 = i32::MAX as u32;

/// What the scheduler answered a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The op's result (0, a count, or a negative errno), as the slot's word.
    pub result: u64,
    /// Virtual time at the grant.
    pub now_ns: u64,
}

// ---- the thread's side (the preload) ----

/// Takes the next slot index for a thread or process image about to be born (by its creator,
/// while it holds the token). The index may lie past the region's slots: the caller checks.
#[inline]
pub fn next_free<W: Word<u32>>(next_slot: &W) -> u32 {
    next_slot.fetch_add(1, Ordering::AcqRel)
}

/// Marks a slot taken by [`next_free`] as `STARTING`, once its identity words are written: the
/// scheduler decides nothing until the newborn has posted (the start barrier).
#[inline]
pub fn claim<S: SlotWords>(slot: &S) {
    slot.state().store(state::STARTING, Ordering::Release);
}

/// Writes a request into the thread's own slot and counts the post. Not visible to the
/// scheduler before [`publish`]; anything else the post carries is written in between.
#[inline(always)]
pub fn write_request<S: SlotWords>(slot: &S, op: u32, args: [u64; 4]) {
    slot.op().store(op, Ordering::Relaxed);
    for (word, value) in slot.args().iter().zip(args) {
        word.store(value, Ordering::Relaxed);
    }
    let posts = slot.posts();
    posts.store(posts.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// Publishes the request written by [`write_request`] (`state := POSTED`) and wakes the
/// scheduler. From here on the thread runs no user code until [`await_grant`] returns.
#[inline(always)]
pub fn publish<S: SlotWords, F: Futex<S::U32>>(slot: &S, wake: &S::U32, futex: &F) {
    slot.state().store(state::POSTED, Ordering::Release);
    wake_scheduler(wake, futex);
}

/// Parks until the slot is `GRANTED`, then reads the answer. Leaves the slot `GRANTED`: the
/// caller moves it on with [`resume`] or [`finish`].
#[inline(always)]
pub fn await_grant<S: SlotWords, F: Futex<S::U32>>(slot: &S, futex: &F) -> Answer {
    loop {
        let current = slot.state().load(Ordering::Acquire);
        if current == state::GRANTED {
            break;
        }
        // POSTED is the normal case; anything else means the scheduler gave up on the
        // execution, which the futex's timeout path notices.
        futex.wait(slot.state(), current);
    }
    Answer { result: slot.result().load(Ordering::Relaxed), now_ns: slot.now_ns().load(Ordering::Relaxed) }
}

/// The granted thread goes on running user code (also: a newborn main thread's first state).
#[inline(always)]
pub fn resume<S: SlotWords>(slot: &S) {
    slot.state().store(state::RUNNING, Ordering::Release);
}

/// Releases the slot for good: the thread is done (its exit was granted), or the thread or image
/// it was claimed for was never born. The caller then wakes the scheduler unless it goes on
/// holding the token (a failed creation: its next post does).
#[inline]
pub fn finish<S: SlotWords>(slot: &S) {
    slot.state().store(state::EXITED, Ordering::Release);
}

/// Tells the scheduler to look at the slots again: bumps its wake word (after the slot change
/// it is to see) and wakes it.
#[inline(always)]
pub fn wake_scheduler<W: Word<u32>, F: Futex<W>>(wake: &W, futex: &F) {
    wake.fetch_add(1, Ordering::Release);
    futex.wake(wake, WAKE_ALL);
}

// ---- the scheduler's side ----

/// What the scheduler sees in a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// `FREE` or `STARTING`: claimed for a thread that has not posted yet.
    Starting,
    /// `GRANTED` or `RUNNING` (or a value no side writes): holds the token, or is about to.
    Running,
    /// `POSTED`, with a post the scheduler has not seen: its count, to be remembered.
    NewPost(u32),
    /// `POSTED`, with the post the scheduler has seen: parked, waiting for a grant.
    Waiting,
    /// `EXITED`: never posts again.
    Exited,
}

/// The scheduler's reading of `slot`, given the post count it saw last. State first, then the
/// count, as the thread publishes them in the other order: a `POSTED` seen here makes the count
/// (and the request, see [`request`]) of that post visible.
#[inline]
pub fn observe<S: SlotWords>(slot: &S, seen_posts: u32) -> Seen {
    match slot.state().load(Ordering::Acquire) {
        state::POSTED => match slot.posts().load(Ordering::Acquire) {
            posts if posts == seen_posts => Seen::Waiting,
            posts => Seen::NewPost(posts),
        },
        state::EXITED => Seen::Exited,
        state::FREE | state::STARTING => Seen::Starting,
        _ => Seen::Running,
    }
}

/// The posted request's op and argument words. Valid after [`observe`] saw the post, until the
/// slot is granted.
#[inline]
pub fn request<S: SlotWords>(slot: &S) -> (u32, [u64; 4]) {
    let args = slot.args();
    (slot.op().load(Ordering::Relaxed), core::array::from_fn(|k| args[k].load(Ordering::Relaxed)))
}

/// Answers the slot's post and hands it the token: the answer, then `state := GRANTED`, then a
/// wake of the one thread parked on it.
#[inline]
pub fn grant<S: SlotWords, F: Futex<S::U32>>(slot: &S, answer: Answer, futex: &F) {
    slot.result().store(answer.result, Ordering::Relaxed);
    slot.now_ns().store(answer.now_ns, Ordering::Relaxed);
    slot.state().store(state::GRANTED, Ordering::Release);
    futex.wake(slot.state(), 1);
}

/// The scheduler's wake word, read before it scans the slots; [`sleep`] is given this value.
#[inline]
pub fn wake_count<W: Word<u32>>(wake: &W) -> u32 {
    wake.load(Ordering::Acquire)
}

/// Slots claimed so far (not bounded by the region's size: the caller bounds it).
#[inline]
pub fn claimed<W: Word<u32>>(next_slot: &W) -> u32 {
    next_slot.load(Ordering::Acquire)
}

/// Sleeps until someone wakes the scheduler after it read `seen` with [`wake_count`] (at once if
/// that happened already), or the futex gives up (a timeout).
#[inline]
pub fn sleep<W: Word<u32>, F: Futex<W>>(wake: &W, seen: u32, futex: &F) -> Waited {
    futex.wait(wake, seen)
}
