//! Short blocking jobs (a DNS query, a TCP connect, a TLS handshake) on reused
//! threads. A thread that finished its job waits a while for the next one
//! before it exits, so a client that makes one connection after another
//! (every response `Connection: close`) does not start a thread for each: a
//! thread start costs more than a loopback connect.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How long an idle thread waits for its next job.
const LINGER: Duration = Duration::from_secs(5);

/// At most this many idle threads wait; others exit when their job is done.
const MAX_IDLE: usize = 8;

/// Idle threads, each by the sender of its job channel.
type Idle = Arc<Mutex<Vec<(u64, mpsc::Sender<Job>)>>>;

/// The client's job threads.
#[derive(Default)]
pub(crate) struct Workers {
    idle: Idle,
    next_id: std::sync::atomic::AtomicU64,
}

impl Workers {
    /// Runs `job` on an idle thread, or on a new one; `false` if the system
    /// refuses a thread.
    pub(crate) fn run(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let mut job: Job = Box::new(job);
        loop {
            let Some((_, tx)) = lock(&self.idle).pop() else { break };
            match tx.send(job) {
                Ok(()) => return true,
                Err(mpsc::SendError(back)) => job = back, // it exited meanwhile
            }
        }
        let idle = Arc::clone(&self.idle);
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::thread::Builder::new()
            .name("switchyard-worker".into())
            .spawn(move || work(id, job, &idle))
            .is_ok()
    }
}

fn lock(idle: &Idle) -> std::sync::MutexGuard<'_, Vec<(u64, mpsc::Sender<Job>)>> {
    idle.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A job thread: its first job, then whatever it is handed while it waits.
fn work(id: u64, first: Job, idle: &Idle) {
    first();
    let (tx, rx) = mpsc::channel::<Job>();
    loop {
        {
            let mut list = lock(idle);
            if list.len() >= MAX_IDLE {
                return;
            }
            list.push((id, tx.clone()));
        }
        match rx.recv_timeout(LINGER) {
            Ok(job) => job(),
            Err(_) => {
                let mut list = lock(idle);
                if let Some(i) = list.iter().position(|(w, _)| *w == id) {
                    list.remove(i);
                    return; // nobody can hand this thread a job any more
                }
                drop(list);
                // Taken from the list just now: its job is on the way.
                match rx.recv() {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_job_runs_and_threads_are_reused() {
        let workers = Workers::default();
        let done = Arc::new(AtomicUsize::new(0));
        let names = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        for _ in 0..50 {
            let (done, names) = (Arc::clone(&done), Arc::clone(&names));
            let (tx, rx) = mpsc::channel();
            assert!(workers.run(move || {
                lock_set(&names).insert(format!("{:?}", std::thread::current().id()));
                done.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(());
            }));
            rx.recv().unwrap(); // one after another, like a churning client
        }
        assert_eq!(done.load(Ordering::SeqCst), 50);
        // One after another: a finished thread takes the next job. A job
        // handed out while the last thread is still registering as idle gets
        // a new thread, so allow a few, never one per job.
        assert!(lock_set(&names).len() <= 10, "{} threads for 50 sequential jobs", lock_set(&names).len());
    }

    #[test]
    fn concurrent_jobs_get_threads_of_their_own() {
        let workers = Workers::default();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let (barrier, tx) = (Arc::clone(&barrier), tx.clone());
            // Each waits for all four: they can only finish on four threads.
            assert!(workers.run(move || {
                barrier.wait();
                let _ = tx.send(());
            }));
        }
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(10)).expect("every job ran");
        }
    }

    fn lock_set(
        m: &Mutex<std::collections::BTreeSet<String>>,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
