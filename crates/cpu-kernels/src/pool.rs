//! A persistent worker pool: `run(n, f)` calls `f(0..n)` across the pool's threads and the caller's, and
//! returns when every call has. Threads spin a while between jobs and then sleep: a decode step hands out
//! a job a layer, the GPU's part of the layer (a few hundred microseconds) between them, and a sleeping
//! thread takes tens of microseconds to wake. Each job's times are summed ([`PoolTimes`]), so a caller can
//! see where a job's wall time went: the tasks, the threads' start, a task held up by a descheduled thread.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_millis(2);

/// A task function whose borrow the pool erases; see [`WorkerPool::run`]'s safety argument.
#[derive(Clone, Copy)]
struct TaskFn(*const (dyn Fn(usize) + Sync + 'static));

// Safety: the pointee is `Sync`, and it is only called while the `run` that lent it waits (below).
unsafe impl Send for TaskFn {}
// Safety: as above.
unsafe impl Sync for TaskFn {}

/// One `run`: its function, the next task to hand out, and how many have finished; when it was published,
/// when a worker first claimed a task and the longest task (nanoseconds after `published`, for
/// [`PoolTimes`]).
struct Job {
    f: TaskFn,
    tasks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
    published: Instant,
    first_claim_ns: AtomicU64,
    longest_ns: AtomicU64,
    /// The tasks' time, summed over the threads.
    task_ns: AtomicU64,
}

impl Job {
    /// Claims and runs tasks until none are left, and returns how many it ran. `worker`: whether a pool
    /// thread (not the caller) runs it, whose first claim times the workers' start.
    fn work(&self, worker: bool) -> usize {
        let mut ran = 0;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.tasks {
                return ran;
            }
            let started = self.published.elapsed();
            if worker && ran == 0 {
                self.first_claim_ns.fetch_min(started.as_nanos() as u64, Ordering::Relaxed);
            }
            // Safety: task `i < tasks` is unfinished, so the `run` that lent `f` is still waiting for it.
            let f = unsafe { &*self.f.0 };
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            let took = self.published.elapsed().saturating_sub(started);
            self.longest_ns.fetch_max(took.as_nanos() as u64, Ordering::Relaxed);
            self.task_ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
            self.done.fetch_add(1, Ordering::Release);
            ran += 1;
        }
    }
}

/// Where the pool's jobs spent their wall time, summed over the jobs since the pool started or the last
/// [`WorkerPool::take_times`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolTimes {
    /// Jobs run.
    pub jobs: u64,
    /// Their tasks, and those of them the caller ran itself (after its `meanwhile`).
    pub tasks: u64,
    /// See `tasks`.
    pub caller_tasks: u64,
    /// From a job's start until its last task finished.
    pub busy: Duration,
    /// The tasks' own time, summed over the threads that ran them (against `busy` times the threads: how
    /// much of the pool's time went to tasks rather than to waiting for a job or a dependency).
    pub task_time: Duration,
    /// The caller's `meanwhile` ([`WorkerPool::run_while`]).
    pub meanwhile: Duration,
    /// The caller's wait, once `meanwhile` and the tasks it claimed were done, for the tasks other threads
    /// still held: long when a thread holding a task lost its core.
    pub join_wait: Duration,
    /// From a job's start until a worker claimed its first task (jobs the workers took part in).
    pub worker_start: Duration,
    /// The longest task of any job.
    pub longest_task: Duration,
}

impl std::ops::AddAssign for PoolTimes {
    fn add_assign(&mut self, o: Self) {
        self.jobs += o.jobs;
        self.tasks += o.tasks;
        self.caller_tasks += o.caller_tasks;
        self.busy += o.busy;
        self.task_time += o.task_time;
        self.meanwhile += o.meanwhile;
        self.join_wait += o.join_wait;
        self.worker_start += o.worker_start;
        self.longest_task = self.longest_task.max(o.longest_task);
    }
}

struct Shared {
    /// The jobs' times so far.
    times: Mutex<PoolTimes>,
    /// Bumped for every job; workers spin on it.
    generation: AtomicU64,
    job: Mutex<Option<Arc<Job>>>,
    wake: Condvar,
    shutdown: AtomicBool,
}

/// Threads that run the CPU kernels' tasks. Dropping it stops them.
pub struct WorkerPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// A pool of `threads` threads in all, the caller's included (so `threads − 1` workers; at least 1).
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            times: Mutex::new(PoolTimes::default()),
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("cpu-experts-{i}"))
                    .spawn(move || worker(&shared))
                    .expect("spawning a CPU expert worker thread")
            })
            .collect();
        Self { shared, workers }
    }

    /// A pool as wide as the machine (`std::thread::available_parallelism`).
    pub fn with_all_cores() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Threads in all, the caller's included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// The jobs' times since the pool started or the last call, which starts them again.
    pub fn take_times(&self) -> PoolTimes {
        std::mem::take(&mut *self.shared.times.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Calls `f(i)` for every `i` in `0..tasks`, on the pool's threads and this one, and returns when all
    /// have returned. A panic in `f` is raised again here, after every task has finished.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        self.run_while(tasks, f, || ());
    }

    /// [`WorkerPool::run`], with this thread calling `meanwhile` first while the pool's threads start on
    /// the tasks; it joins them once `meanwhile` returns (a decode step records the GPU's next commands
    /// while the host computes the layer's experts). A panic in `meanwhile` is raised again after every
    /// task has finished.
    pub fn run_while<R>(&self, tasks: usize, f: &(dyn Fn(usize) + Sync), meanwhile: impl FnOnce() -> R) -> R {
        if tasks == 0 {
            return meanwhile();
        }
        // Safety: the lifetime is erased so workers can hold the pointer. `Job::work` calls it only for a
        // claimed task below `tasks`, and this function returns only once `done == tasks`, after every
        // such call has returned; a worker still holding the `Job` afterwards can claim no task.
        let f: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        let job = Arc::new(Job {
            f: TaskFn(f),
            tasks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            published: Instant::now(),
            first_claim_ns: AtomicU64::new(u64::MAX),
            longest_ns: AtomicU64::new(0),
            task_ns: AtomicU64::new(0),
        });
        if !self.workers.is_empty() && tasks > 1 {
            // Published and bumped under the lock that a worker holds between its last check and its
            // sleep, so it cannot miss the wake-up.
            let mut slot = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            *slot = Some(Arc::clone(&job));
            self.shared.generation.fetch_add(1, Ordering::Release);
            self.shared.wake.notify_all();
        }
        // Caught, so that this function still waits for every task before unwinding (the safety above).
        let result = catch_unwind(AssertUnwindSafe(meanwhile));
        let meanwhile = job.published.elapsed();
        let caller_tasks = job.work(false);
        let start = Instant::now();
        while job.done.load(Ordering::Acquire) < tasks {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let first_claim = job.first_claim_ns.load(Ordering::Relaxed);
        let this_job = PoolTimes {
            jobs: 1,
            tasks: tasks as u64,
            caller_tasks: caller_tasks as u64,
            busy: job.published.elapsed(),
            task_time: Duration::from_nanos(job.task_ns.load(Ordering::Relaxed)),
            meanwhile,
            join_wait: start.elapsed(),
            worker_start: if first_claim == u64::MAX {
                Duration::ZERO
            } else {
                Duration::from_nanos(first_claim)
            },
            longest_task: Duration::from_nanos(job.longest_ns.load(Ordering::Relaxed)),
        };
        *self.shared.times.lock().unwrap_or_else(|e| e.into_inner()) += this_job;
        let result = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if job.panicked.load(Ordering::Relaxed) {
            panic!("a CPU expert task panicked");
        }
        result
    }
}

fn worker(shared: &Shared) {
    let mut seen = 0;
    loop {
        let idle = Instant::now();
        loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if shared.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if idle.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let guard = shared.job.lock().unwrap_or_else(|e| e.into_inner());
            // Checked again under the lock the publisher takes, so a wake-up cannot be missed.
            if shared.generation.load(Ordering::Acquire) == seen && !shared.shutdown.load(Ordering::Acquire) {
                drop(shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
            }
        }
        let (generation, job) = {
            let guard = shared.job.lock().unwrap_or_else(|e| e.into_inner());
            (shared.generation.load(Ordering::Acquire), guard.clone())
        };
        seen = generation;
        if let Some(job) = job {
            job.work(true);
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        {
            let _guard = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::Release);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("threads", &self.threads()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_over_many_jobs() {
        let pool = WorkerPool::new(4);
        for tasks in [0, 1, 2, 3, 17, 256] {
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, &|i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn a_panicking_task_is_raised_in_the_caller_and_the_pool_still_works() {
        let pool = WorkerPool::new(3);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, &|i| {
                assert_ne!(i, 5, "task 5 fails");
            })
        }));
        assert!(caught.is_err());
        let sum = AtomicUsize::new(0);
        pool.run(10, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 45);
    }

    #[test]
    fn run_while_runs_the_callers_work_and_every_task() {
        for threads in [1, 4] {
            let pool = WorkerPool::new(threads);
            let sum = AtomicUsize::new(0);
            let got = pool.run_while(
                100,
                &|i| {
                    sum.fetch_add(i, Ordering::Relaxed);
                },
                || 7,
            );
            assert_eq!((got, sum.load(Ordering::Relaxed)), (7, 4950), "{threads} threads");
        }
    }

    #[test]
    fn a_panic_meanwhile_is_raised_after_the_tasks_finish() {
        let pool = WorkerPool::new(3);
        let count = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run_while(
                50,
                &|_| {
                    count.fetch_add(1, Ordering::Relaxed);
                },
                || panic!("meanwhile fails"),
            )
        }));
        assert!(caught.is_err());
        assert_eq!(count.load(Ordering::Relaxed), 50, "every task ran before the panic was raised");
    }

    #[test]
    fn the_jobs_times_add_up_and_start_again_when_taken() {
        for threads in [1, 3] {
            let pool = WorkerPool::new(threads);
            let nap = Duration::from_millis(5);
            pool.run_while(40, &|_| std::hint::black_box(()), || std::thread::sleep(nap));
            pool.run(1, &|_| std::thread::sleep(nap));
            let t = pool.take_times();
            assert_eq!((t.jobs, t.tasks), (2, 41), "{threads} threads");
            // One task runs on the caller; without workers every task does.
            assert!(t.caller_tasks >= 1 && (threads > 1 || t.caller_tasks == 41), "{t:?}");
            assert!(t.meanwhile >= nap && t.longest_task >= nap && t.task_time >= t.longest_task, "{t:?}");
            assert!(t.busy >= t.meanwhile + nap && t.busy >= t.join_wait, "{t:?}");
            assert_eq!(pool.take_times(), PoolTimes::default());
        }
    }

    #[test]
    fn workers_wake_after_sleeping() {
        let pool = WorkerPool::new(3);
        std::thread::sleep(SPIN * 5);
        let sum = AtomicUsize::new(0);
        pool.run(64, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 64 * 63 / 2);
    }
}
