//! The driver loop against a fake target: no process is launched. A [`FakeProgram`] thread of the
//! test speaks the slot protocol on a real region as the preload would — claims slots, posts the
//! next request of each thread's script once the previous one is granted, claims a child's slot
//! after a `ThreadCreate` grant, reports the process's exit after a `ProcessExit` grant — and a
//! [`FakeTree`] hands that exit to the driver as the reaper would. The tests check the driver's
//! decisions: who is granted, when the run ends, and the deadlock, hang and divergence verdicts.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dara_abi::{state, Addr, Deadline, MutexKind, NetFlags, Request, StartKind, TimerClock, TimerExpiry};
use dara_tracer::reaper::{ExitEvent, ExitStatus};
use dara_tracer::LaunchError;

use super::driver::Execution;
use super::target::Target;
use super::world::Closed;
use super::ExecutionConfig;
use crate::choice::{Choice, Decide, Divergence, ThreadId};
use crate::outcome::Outcome;
use crate::region::Region;

/// Exits the fake program reported, shared with the fake tree.
type Exits = Arc<Mutex<VecDeque<ExitEvent>>>;

/// The reaper's side of the fake: the program's exit, once it reported one.
struct FakeTree {
    pid: u32,
    exits: Exits,
    root_exited: bool,
}

impl Target for FakeTree {
    fn root_pid(&self) -> u32 {
        self.pid
    }

    fn pids_virtual(&self) -> bool {
        false
    }

    fn set_next_pid(&mut self, _pid: u32) -> bool {
        false
    }

    fn keep(&self, _process: usize, _pidfd: i32) {}

    fn try_exit(&mut self) -> Option<ExitEvent> {
        let event = self.exits.lock().unwrap().pop_front()?;
        self.root_exited |= event.pid == self.pid;
        Some(event)
    }

    fn all_gone(&mut self) -> bool {
        self.root_exited && self.exits.lock().unwrap().is_empty()
    }

    fn kernel_still_reaping(&mut self) -> bool {
        false
    }

    fn status_being_reaped(&self, _pid: u32) -> Option<ExitStatus> {
        None
    }

    fn launch(&mut self, command: &[String]) -> Result<u32, LaunchError> {
        Err(LaunchError::Spawn { program: command.join(" "), source: std::io::Error::other("the fake target launches nothing") })
    }

    fn kill_all(&mut self) -> bool {
        true
    }

    fn survivors(&self) -> String {
        String::new()
    }

    fn stderr_tail(&self) -> Vec<u8> {
        Vec::new()
    }

    fn output_drained(&self, _limit: std::time::Duration) -> bool {
        true // no output pipes
    }

    fn ensure_agent(&mut self) -> Result<(), String> {
        Err("the fake target has no agent".into())
    }
}

/// A program of one process whose threads post their scripts: thread 0's first, then one more
/// script per `ThreadCreate` granted, in grant order. Every fake thread is this test process
/// (its pid, and its main thread's tid, which the watchdog finds asleep but never long enough).
struct FakeProgram {
    region: Arc<Region>,
    pid: u32,
    scripts: Vec<VecDeque<Request>>,
    /// The request each claimed slot posted last.
    posted: Vec<Request>,
    exits: Exits,
    /// (slot, request) of every grant, in order.
    grants: Arc<Mutex<Vec<(ThreadId, Request)>>>,
    stop: Arc<AtomicBool>,
}

impl FakeProgram {
    /// Runs the program on its own thread until its process exits or `stop` is set.
    fn start(self) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || self.run())
    }

    fn run(mut self) {
        self.claim(Request::ProcessStart { parent: None, kind: StartKind::Launched });
        while !self.stop.load(Ordering::Relaxed) {
            for slot in 0..self.posted.len() {
                if self.region.slot(slot).state.load(Ordering::Acquire) == state::GRANTED && !self.granted(slot) {
                    return; // the process exited
                }
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Slot `slot` was granted its post: it runs on to its next one. False once the process
    /// exited.
    fn granted(&mut self, slot: usize) -> bool {
        let request = self.posted[slot];
        self.grants.lock().unwrap().push((slot as ThreadId, request));
        let s = self.region.slot(slot);
        s.state.store(state::RUNNING, Ordering::Release);
        match request {
            Request::ProcessExit { status } => {
                self.exits.lock().unwrap().push_back(ExitEvent { pid: self.pid, status: ExitStatus::Code(status) });
                self.region.wake_scheduler();
                return false;
            }
            Request::ThreadExit => {
                s.state.store(state::EXITED, Ordering::Release);
                self.region.wake_scheduler();
                return true;
            }
            // The creator claims its child's slot before it posts again, as the preload does.
            Request::ThreadCreate => self.claim(Request::ThreadStart { creator: slot as u32 }),
            _ => {}
        }
        // A script that ends without an exit leaves its thread running for good: a stall.
        if let Some(next) = self.scripts[slot].pop_front() {
            self.post(slot, next);
        }
        true
    }

    /// Claims the next slot for a new thread of the process, which posts `first`.
    fn claim(&mut self, first: Request) {
        let slot = self.region.header().next_slot.fetch_add(1, Ordering::AcqRel) as usize;
        assert_eq!(slot, self.posted.len(), "slots are claimed in order");
        let s = self.region.slot(slot);
        s.process.store(0, Ordering::Relaxed);
        s.pid.store(self.pid, Ordering::Relaxed);
        s.tid.store(self.pid, Ordering::Relaxed);
        s.state.store(state::STARTING, Ordering::Release);
        self.posted.push(first);
        self.post(slot, first);
    }

    /// Posts `request` in `slot` and wakes the scheduler, as the preload's handoff does.
    fn post(&mut self, slot: usize, request: Request) {
        self.posted[slot] = request;
        let s = self.region.slot(slot);
        let (op, args) = request.encode();
        s.op.store(op as u32, Ordering::Relaxed);
        for (word, value) in s.args.iter().zip(args) {
            word.store(value, Ordering::Relaxed);
        }
        s.posts.store(s.posts.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        s.program_mask.store(u64::MAX, Ordering::Relaxed);
        s.state.store(state::POSTED, Ordering::Release);
        self.region.wake_scheduler();
    }
}

/// A strategy given as a function of the step and the choices, which also keeps the thread of
/// every choice it made.
struct Pick<F> {
    pick: F,
    chosen: Vec<ThreadId>,
}

impl<F: FnMut(u64, &[Choice]) -> usize> Decide for Pick<F> {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let i = (self.pick)(step, choices);
        if let Some(c) = choices.get(i) {
            self.chosen.push(c.thread);
        }
        Ok(i)
    }
}

fn pick<F: FnMut(u64, &[Choice]) -> usize>(f: F) -> Pick<F> {
    Pick { pick: f, chosen: Vec::new() }
}

fn config(max_steps: u64) -> ExecutionConfig {
    ExecutionConfig {
        command: vec!["fake".into()],
        cwd: None,
        env: Vec::new(),
        preload: "/nonexistent/libdara_preload.so".into(),
        agent: None,
        cpus: 2,
        memory: Default::default(),
        library_cache: None,
        pin_cpu: None,
        random_seed: 1,
        max_steps,
        max_vtime_ns: u64::MAX / 2,
        // The fake threads are this process's main thread to the watchdog: asleep, never long.
        watchdog: Duration::from_secs(600),
        max_processes: 4,
        busy_limit: Duration::from_secs(600),
        symbolize: false,
        discard_output: true,
        preempt: Default::default(),
        profile: false,
        cluster: None,
        setup: None,
        cleanup: None,
        outside: Default::default(),
        time: Default::default(),
        stop_at_step: None,
        pause_before: None,
        liveness: None,
        fork_server: None,
        namespaces: None,
        leftovers: None,
        pids: Default::default(),
    }
}

/// What one driven run gave.
struct Run {
    outcome: Outcome,
    /// The thread of each step, as recorded.
    steps: Vec<ThreadId>,
    /// The virtual time of each step.
    times: Vec<u64>,
    grants: Vec<(ThreadId, Request)>,
}

/// Drives the fake program whose threads post `scripts` (thread 0's first, then one per
/// `ThreadCreate` granted) under `decide`, with a step bound of `max_steps`.
fn drive(scripts: Vec<Vec<Request>>, max_steps: u64, decide: &mut dyn Decide) -> Run {
    drive_with(&config(max_steps), scripts, decide)
}

/// [`drive`] with a configuration of the test's own.
fn drive_with(cfg: &ExecutionConfig, scripts: Vec<Vec<Request>>, decide: &mut dyn Decide) -> Run {
    let region = Arc::new(Region::create(cfg.cpus, cfg.random_seed, &cfg.preempt, false, false).expect("a region"));
    let pid = std::process::id();
    let exits = Exits::default();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let program = FakeProgram { region: Arc::clone(&region), pid, scripts: scripts.into_iter().map(VecDeque::from).collect(), posted: Vec::new(), exits: Arc::clone(&exits), grants: Arc::clone(&grants), stop: Arc::clone(&stop) };
    let tree = FakeTree { pid, exits, root_exited: false };
    let mut run = Execution::new(cfg, region, Box::new(tree), Box::new(Closed));
    run.processes.launched.push(pid);
    let running = program.start();
    let outcome = run.drive(decide, &AtomicBool::new(false));
    stop.store(true, Ordering::Relaxed);
    running.join().expect("the fake program ran");
    let steps = run.steps.iter().map(|s| s.choice.thread).collect();
    let times = run.steps.iter().map(|s| s.now_ns).collect();
    let grants = grants.lock().unwrap().clone();
    Run { outcome, steps, times, grants }
}

/// Two mutexes of this process (the model may read a mutex's memory).
static LOCKS: [u64; 2] = [0, 0];

fn lock(i: usize) -> Request {
    Request::MutexLock { mutex: Addr(&LOCKS[i] as *const u64 as u64), kind: MutexKind::Normal, deadline: Deadline::Never }
}

fn unlock(i: usize) -> Request {
    Request::MutexUnlock { mutex: Addr(&LOCKS[i] as *const u64 as u64), kind: MutexKind::Normal }
}

/// The thread of the last choice, or of the first: a strategy that always runs the newest or
/// the oldest thread.
fn newest(_: u64, choices: &[Choice]) -> usize {
    (0..choices.len()).max_by_key(|&i| choices[i].thread).unwrap_or(0)
}

fn oldest(_: u64, choices: &[Choice]) -> usize {
    (0..choices.len()).min_by_key(|&i| choices[i].thread).unwrap_or(0)
}

#[test]
fn a_lone_thread_runs_to_its_exit_and_its_status_is_the_verdict() {
    let mut decide = pick(oldest);
    let run = drive(vec![vec![Request::Yield, Request::ClockRead, Request::ProcessExit { status: 3 }]], 100, &mut decide);
    assert_eq!(run.outcome, Outcome::Exited { code: 3, location: None });
    let posted: Vec<Request> = run.grants.iter().map(|&(_, r)| r).collect();
    assert_eq!(posted, vec![Request::ProcessStart { parent: None, kind: StartKind::Launched }, Request::Yield, Request::ClockRead, Request::ProcessExit { status: 3 }]);
    assert_eq!(run.steps, vec![0; 4], "one step per grant, all of thread 0");
}

#[test]
fn the_thread_the_strategy_picks_is_the_one_granted_and_the_same_picks_give_the_same_run() {
    let scripts = || vec![vec![Request::ThreadCreate, Request::Yield, Request::Yield, Request::ProcessExit { status: 0 }], vec![Request::Yield, Request::ThreadExit]];
    for strategy in [newest as fn(u64, &[Choice]) -> usize, oldest] {
        let mut decide = pick(strategy);
        let run = drive(scripts(), 100, &mut decide);
        assert_eq!(run.outcome, Outcome::Exited { code: 0, location: None });
        // Every decision grants the chosen thread. (The fake may see a `ThreadExit` grant after
        // the next one: the driver does not wait for an exiting thread to post again.)
        let mut granted: Vec<ThreadId> = run.grants.iter().map(|&(t, _)| t).collect();
        let mut chosen = decide.chosen.clone();
        granted.sort();
        chosen.sort();
        assert_eq!(granted, chosen, "one grant per decision, to the chosen thread");
        assert_eq!(run.steps, decide.chosen);
        let mut again = pick(strategy);
        assert_eq!(drive(scripts(), 100, &mut again).steps, run.steps, "the same choices make the same run");
    }
    // Newest first: the child runs to its end as soon as it exists.
    let mut decide = pick(newest);
    let run = drive(scripts(), 100, &mut decide);
    assert_eq!(run.steps, vec![0, 0, 1, 1, 1, 0, 0, 0]);
    let child: Vec<Request> = run.grants.iter().filter(|&&(t, _)| t == 1).map(|&(_, r)| r).collect();
    assert_eq!(child, vec![Request::ThreadStart { creator: 0 }, Request::Yield, Request::ThreadExit], "a thread's posts are granted in its order");
    // Oldest first: thread 0 exits before its child ever runs, and the run ends with it.
    let mut decide = pick(oldest);
    assert_eq!(drive(scripts(), 100, &mut decide).steps, vec![0; 5]);
}

#[test]
fn no_enabled_thread_while_threads_live_is_a_deadlock_naming_them() {
    // Thread 0 takes lock 0 and then wants lock 1; its child takes them the other way round.
    let scripts = vec![vec![lock(0), Request::ThreadCreate, lock(1), unlock(1), unlock(0), Request::ProcessExit { status: 0 }], vec![lock(1), lock(0), unlock(0), unlock(1), Request::ThreadExit]];
    // The child runs whenever it can: it takes lock 1 while thread 0 holds lock 0.
    let mut decide = pick(newest);
    let run = drive(scripts.clone(), 100, &mut decide);
    let Outcome::Deadlock { threads } = &run.outcome else { panic!("expected a deadlock, got {:?}", run.outcome) };
    let mut blocked: Vec<ThreadId> = threads.iter().map(|t| t.thread).collect();
    blocked.sort();
    assert_eq!(blocked, vec![0, 1]);
    // Thread 0 first whenever it can: it takes both locks before the child, and the run ends.
    let mut decide = pick(oldest);
    assert_eq!(drive(scripts, 100, &mut decide).outcome, Outcome::Exited { code: 0, location: None });
}

#[test]
fn the_step_bound_ends_a_run_that_goes_on_as_a_hang() {
    let mut script = vec![Request::Yield; 50];
    script.push(Request::ProcessExit { status: 0 });
    let mut decide = pick(oldest);
    let run = drive(vec![script], 10, &mut decide);
    let Outcome::Hang { reason } = &run.outcome else { panic!("expected a hang, got {:?}", run.outcome) };
    assert!(reason.contains("step bound"), "{reason}");
    assert_eq!(run.steps.len(), 10, "exactly the bound's number of decisions");
}

#[test]
fn a_choice_index_the_choices_do_not_have_is_a_divergence_at_that_step() {
    let mut decide = pick(|step, choices: &[Choice]| if step == 2 { choices.len() } else { 0 });
    let run = drive(vec![vec![Request::Yield, Request::Yield, Request::ProcessExit { status: 0 }]], 100, &mut decide);
    assert!(matches!(&run.outcome, Outcome::Diverged { step: 2, .. }), "{:?}", run.outcome);
    assert_eq!(run.steps.len(), 2);
}

#[test]
fn a_timerfd_fires_when_the_clock_jumps_to_its_deadline_and_its_reader_goes_on() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const MS: u64 = 1_000_000;
    // The eventfd the preload would have made for the timer: this process's own.
    // SAFETY: eventfd takes integers and returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    assert!(raw >= 0);
    // SAFETY: a descriptor just made, owned by nobody else.
    let eventfd = unsafe { OwnedFd::from_raw_fd(raw) };
    // Where the driver writes `timerfd_gettime`'s answer (in this process's memory).
    let current = Box::new(libc::itimerspec { it_interval: libc::timespec { tv_sec: 9, tv_nsec: 9 }, it_value: libc::timespec { tv_sec: 9, tv_nsec: 9 } });
    let script = vec![
        Request::TimerCreate { fd: raw, clock: TimerClock::Monotonic },
        Request::TimerSet { fd: raw, expiry: TimerExpiry::After(10 * MS), interval: 10 * MS, old: Addr(0) },
        Request::NetRecv { fd: raw, flags: NetFlags(0), deadline: Deadline::Never, len: 8 },
        Request::TimerGet { fd: raw, current: Addr(&*current as *const libc::itimerspec as u64) },
        Request::ProcessExit { status: 0 },
    ];
    let mut decide = pick(oldest);
    let run = drive(vec![script], 100, &mut decide);
    assert_eq!(run.outcome, Outcome::Exited { code: 0, location: None });
    // The timer calls are no steps: the start, the read (once the clock jumped to the deadline),
    // the exit.
    assert_eq!(run.steps.len(), 3, "{:?}", run.grants);
    assert!((10 * MS..10 * MS + 10_000).contains(&run.times[1]), "the read went on at the deadline, not at {} ns", run.times[1]);
    let mut count = [0u8; 8];
    // SAFETY: reads 8 bytes into a live local buffer.
    assert_eq!(unsafe { libc::read(eventfd.as_raw_fd(), count.as_mut_ptr().cast(), 8) }, 8);
    assert_eq!(u64::from_ne_bytes(count), 1, "one expiration was written into the eventfd");
    let left = current.it_value.tv_sec as u64 * 1_000 * MS + current.it_value.tv_nsec as u64;
    assert_eq!((current.it_interval.tv_sec, current.it_interval.tv_nsec), (0, 10 * MS as i64), "the period");
    assert!(left > 9 * MS && left <= 10 * MS, "the next expiry is a period after the first: {left} ns left");
}

#[test]
fn a_wait_in_which_nothing_moves_ends_the_run_and_names_what_it_waited_for() {
    // Thread 0 is granted a yield and then never posts again, while its thread (this test's
    // main thread, to the watchdog) sleeps without using CPU time: nothing moves.
    let mut cfg = config(100);
    cfg.busy_limit = Duration::from_secs(1);
    let mut decide = pick(oldest);
    let run = drive_with(&cfg, vec![vec![Request::Yield]], &mut decide);
    let Outcome::Uncontrolled { thread, detail, .. } = &run.outcome else { panic!("expected a stopped run, got {:?}", run.outcome) };
    assert_eq!(*thread, 0);
    assert!(detail.contains("nothing moved") && detail.contains("thread 0 holds the run token"), "{detail}");
    assert_eq!(run.steps, vec![0, 0], "the start and the yield were decided");
}
