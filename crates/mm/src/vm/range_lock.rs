//! Range locks on page-table nodes (`mm.mmap_lock = "range"`): RadixVM's and CortenMM's
//! address space, in which an operation locks only the page-table pages that cover its range.
//!
//! # The designs
//!
//! - RadixVM (Clements, Kaashoek and Zeldovich, EuroSys'13) keeps the address space in a radix
//!   tree shaped like the page table and locks the tree's nodes that an operation's range
//!   covers, so mmap, munmap and faults on non-overlapping ranges touch no common lock or
//!   line, and scale with the cores.
//! - CortenMM (SOSP'25) drops the separate tree: the page table *is* the address space. A
//!   range operation walks the table from the root to the deepest page-table page whose span
//!   contains its whole range and locks that one page; a fault, whose range is one page,
//!   locks its PTE-table page.
//!
//! # The engine's protocol
//!
//! Every page-table page has a [`NodeLock`] (kept next to its split PTE lock, in the line the
//! kernel keeps in `struct ptdesc`), a reader-writer word: bit 31 a writer, the low bits the
//! readers. Its waiters spin (a writer claims the word, then waits for the readers in it to
//! leave), so the trace records it as a queued rwlock, not as a sleeping rw_semaphore. Node
//! spans nest (a table's span contains its children's), so two ranges that
//! overlap are covered by nodes of which one is an ancestor of (or is) the other, and two
//! disjoint ranges covered by sibling subtrees share no node.
//!
//! - An operation on `[start, end)` (mmap at a fixed address, munmap, a protection change)
//!   write-locks the *covering node*, the deepest table whose span contains the range
//!   ([`lock_cover`]). It then checks the node's ancestors: if one is write-locked, it lets
//!   its node go and waits for that ancestor (an operation with a larger range holds it).
//!   Finally it waits until every existing descendant table inside its range is idle: an
//!   operation or a fault that took one of them before the covering node was write-locked
//!   finishes first, and one that takes it afterwards finds the covering node write-locked
//!   when it checks its ancestors, and backs off.
//! - A fault read-locks its PTE table's node ([`lock_leaf`]) and checks the ancestors the same
//!   way. Faults on one table share it (as they share the split PTE lock that serialises their
//!   PTE updates, which they still take), and exclude the operations whose range covers it.
//!
//! Why one of two racing parties always sees the other: the holder of a descendant writes its
//! node's word, issues a `SeqCst` fence and then reads the ancestor's; the holder of the
//! ancestor writes the ancestor's word, issues a `SeqCst` fence and then reads the
//! descendant's (and the entries leading to it). Of two `SeqCst` fences one comes first, so
//! at least one of the reads sees the other's write (the store-buffering pattern, which needs
//! the fences: acquire and release alone allow both reads to miss). A table installed by a
//! fault before it takes the table's lock is seen by the drain the same way. Nobody waits
//! while holding a node another party may need: a party that backs off releases its node
//! first. The loom model `tests/loom_range.rs` checks the protocol on these functions.
//!
//! Why the PTE-table node lock, not the split PTE lock alone, guards a fault: the split lock
//! is held only around a PTE update, while a fault must exclude a munmap of its address from
//! its VMA lookup to its install (the job the per-VMA lock and mmap_lock do in Linux). A
//! fault takes the node for read and the split lock as before; both live in the same cache
//! line, so the node lock costs no extra line transfer.

use pagelab_sync::Backoff;
use pagelab_sync::shim::atomic::{AtomicU32, Ordering, fence};
use pagelab_sync::trace::{self, Access, LockModel};

/// A page-table page's range lock while tasks on one CPU only have taken it (since the page
/// was installed): private to that task, recorded nowhere. Each task of RadixVM's mapbench,
/// or of CortenMM's low-contention benchmarks where each task works in its own slot of one
/// VMA, has its own PTE tables and covering nodes.
pub static PT_NODE_LOCK: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("pt node lock", pagelab_sync::Scope::Private);
/// A page-table page's range lock that tasks on more than one CPU have taken (they fault or
/// unmap in one table's span): shared by the threads of the mm, so replay makes exactly these
/// meet. Instances are per page-table page (one PTE table's span is 2 MiB).
pub static PT_NODE_LOCK_SHARED: pagelab_sync::LockClass =
    pagelab_sync::LockClass::new("pt node lock (shared)", pagelab_sync::Scope::Mm);

const WRITER: u32 = 1 << 31;
/// In [`NodeLock`]'s user word: a second CPU has taken the lock.
const USERS_SHARED: u32 = 1 << 31;

/// The reader-writer word of one page-table page, and who has taken it.
pub struct NodeLock {
    word: AtomicU32,
    /// The CPU (plus one) that first took the lock since the page was installed, or
    /// [`USERS_SHARED`] once another did too; 0: nobody yet. Written twice per page at most,
    /// so reading it on every acquisition adds no line transfer. Only traces read it.
    users: std::sync::atomic::AtomicU32,
}

impl Default for NodeLock {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeLock {
    pub fn new() -> Self {
        NodeLock {
            word: AtomicU32::new(0),
            users: std::sync::atomic::AtomicU32::new(0),
        }
    }

    fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// The task on CPU `cpu` is about to take the lock: remember the first CPU, and mark the
    /// lock shared when another one comes (the line has then moved between CPUs).
    #[inline]
    pub fn note_user(&self, cpu: u16) {
        use std::sync::atomic::Ordering::Relaxed;
        let me = u32::from(cpu) + 1;
        match self.users.load(Relaxed) {
            USERS_SHARED => {}
            0 => {
                if let Err(f) = self.users.compare_exchange(0, me, Relaxed, Relaxed)
                    && f != me
                {
                    self.users.store(USERS_SHARED, Relaxed);
                }
            }
            f if f != me => self.users.store(USERS_SHARED, Relaxed),
            _ => {}
        }
    }

    /// Forget who took the lock: the page became a new page-table page.
    pub fn reset_users(&self) {
        self.users.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether tasks on more than one CPU have taken the lock since the page was installed.
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.users.load(std::sync::atomic::Ordering::Relaxed) == USERS_SHARED
    }

    /// The class an acquisition records under now (the release records the same one).
    #[inline]
    fn class(&self) -> &'static pagelab_sync::LockClass {
        if self.is_shared() {
            &PT_NODE_LOCK_SHARED
        } else {
            &PT_NODE_LOCK
        }
    }

    /// Waits until no writer holds the word, then swaps it for `next(word)` (Acquire on
    /// success); returns the backoff, for a caller that waits again.
    fn claim(&self, next: impl Fn(u32) -> u32) -> Backoff {
        let mut b = Backoff::new();
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            if cur & WRITER != 0 {
                b.snooze();
                cur = self.word.load(Ordering::Relaxed);
                continue;
            }
            match self.word.compare_exchange_weak(
                cur,
                next(cur),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return b,
                Err(c) => cur = c,
            }
        }
    }

    /// Take the node for read: wait while a writer holds it. Returns the class the
    /// acquisition was recorded under, for [`NodeLock::read_unlock`].
    pub fn read_lock(&self) -> Traced {
        self.claim(|cur| cur + 1);
        // Our count is ordered before this reader's loads of the ancestors' words (see the
        // module documentation).
        fence(Ordering::SeqCst);
        let class = self.class();
        trace::acquire(class, self.id(), LockModel::QRwLock, Access::Shared, false);
        Traced(class)
    }

    pub fn read_unlock(&self, t: Traced) {
        trace::release(t.0, self.id(), LockModel::QRwLock, Access::Shared);
        // Release: the reader's work happens before a writer's drain sees the count fall.
        self.word.fetch_sub(1, Ordering::Release);
    }

    /// Take the node for write: claim the writer bit (new readers are refused from then on),
    /// then wait for the readers already in to leave.
    pub fn write_lock(&self) -> Traced {
        let mut b = self.claim(|cur| cur | WRITER);
        // The writer bit is ordered before the writer's loads of the ancestors' and the
        // descendants' words (and of the entries that lead to the descendants).
        fence(Ordering::SeqCst);
        b.reset();
        while self.word.load(Ordering::Acquire) != WRITER {
            b.snooze();
        }
        let class = self.class();
        trace::acquire(
            class,
            self.id(),
            LockModel::QRwLock,
            Access::Exclusive,
            false,
        );
        Traced(class)
    }

    pub fn write_unlock(&self, t: Traced) {
        trace::release(t.0, self.id(), LockModel::QRwLock, Access::Exclusive);
        // Readers are refused while the writer bit is set, so the word is exactly WRITER.
        self.word.store(0, Ordering::Release);
    }

    /// Is the node write-locked? Acquire: if not, and the last writer has left, what it
    /// did is visible. Callers that race a writer have issued the `SeqCst` fence of their
    /// own lock first (see the module documentation).
    #[inline]
    pub fn is_write_locked(&self) -> bool {
        self.word.load(Ordering::Acquire) & WRITER != 0
    }

    /// Is anybody holding the node?
    #[inline]
    pub fn is_held(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }

    /// Wait until no writer holds the node.
    pub fn wait_no_writer(&self) {
        let mut b = Backoff::new();
        while self.word.load(Ordering::Acquire) & WRITER != 0 {
            b.snooze();
        }
    }

    /// Wait until nobody holds the node.
    pub fn wait_idle(&self) {
        let mut b = Backoff::new();
        while self.word.load(Ordering::Acquire) != 0 {
            b.snooze();
        }
    }
}

/// The class an acquisition of a [`NodeLock`] was recorded under: its release records the
/// same, even if a second CPU has marked the lock shared meanwhile.
#[derive(Clone, Copy, Debug)]
#[must_use = "pass it to the unlock"]
pub struct Traced(&'static pagelab_sync::LockClass);

/// A fault's read hold on its PTE table's node.
#[must_use = "the node is released when the guard drops"]
pub struct LeafGuard<'a>(&'a NodeLock, Traced);

impl Drop for LeafGuard<'_> {
    fn drop(&mut self) {
        self.0.read_unlock(self.1);
    }
}

/// A range operation's write hold on its covering node.
#[must_use = "the node is released when the guard drops"]
pub struct CoverGuard<'a>(&'a NodeLock, Traced);

impl Drop for CoverGuard<'_> {
    fn drop(&mut self) {
        self.0.write_unlock(self.1);
    }
}

/// The first write-locked node among `ancestors`.
fn locked_ancestor<'a>(ancestors: &[&'a NodeLock]) -> Option<&'a NodeLock> {
    ancestors.iter().copied().find(|a| a.is_write_locked())
}

/// A fault's hold: `leaf` (its PTE table's node) for read, with none of `ancestors` (the
/// tables above it, root first) write-locked at the time the hold was confirmed.
pub fn lock_leaf<'a>(leaf: &'a NodeLock, ancestors: &[&NodeLock]) -> LeafGuard<'a> {
    loop {
        let t = leaf.read_lock();
        match locked_ancestor(ancestors) {
            None => return LeafGuard(leaf, t),
            Some(a) => {
                // Back off before waiting: the ancestor's holder may be draining our node.
                leaf.read_unlock(t);
                a.wait_no_writer();
            }
        }
    }
}

/// A range operation's hold: `node` (its covering node) for write, with none of `ancestors`
/// write-locked, and every node `descendants` yields (the existing tables below `node` inside
/// the range) idle once. `descendants` is called once the node is held, so that it sees the
/// tables installed up to then.
pub fn lock_cover<'a>(
    node: &'a NodeLock,
    ancestors: &[&NodeLock],
    descendants: impl FnOnce(&mut dyn FnMut(&NodeLock)),
) -> CoverGuard<'a> {
    let t = loop {
        let t = node.write_lock();
        match locked_ancestor(ancestors) {
            None => break t,
            Some(a) => {
                node.write_unlock(t);
                a.wait_no_writer();
            }
        }
    };
    descendants(&mut |d: &NodeLock| d.wait_idle());
    CoverGuard(node, t)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Its waiters spin: the replay must model it as a queued rwlock, not a sleeping rwsem.
    #[test]
    fn the_trace_records_a_spinning_rwlock() {
        let n = NodeLock::new();
        n.note_user(0);
        n.note_user(1);
        trace::start(16);
        let t = n.read_lock();
        n.read_unlock(t);
        let t = n.write_lock();
        n.write_unlock(t);
        let ev = trace::stop();
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert!(ev.iter().all(|e| e.model == LockModel::QRwLock), "{ev:?}");
    }

    /// A node one CPU takes records nothing (its line stays with that CPU); once a second
    /// CPU takes it, it records under the shared class, and an acquisition made before that
    /// releases under the class it was acquired under. A new page forgets its users.
    #[test]
    fn the_scope_follows_the_cpus_that_take_it() {
        let n = NodeLock::new();
        n.note_user(3);
        n.note_user(3);
        trace::start(16);
        let t = n.read_lock();
        n.note_user(5);
        n.read_unlock(t);
        let private = trace::stop();
        assert!(private.is_empty(), "{private:?}");
        assert!(n.is_shared());
        trace::start(16);
        let t = n.write_lock();
        n.write_unlock(t);
        let shared = trace::stop();
        assert_eq!(shared.len(), 2, "{shared:?}");
        assert!(
            shared
                .iter()
                .all(|e| std::ptr::eq(e.class, &PT_NODE_LOCK_SHARED))
        );
        n.reset_users();
        n.note_user(5);
        assert!(!n.is_shared());
    }

    #[test]
    fn readers_share_writers_exclude() {
        let n = NodeLock::new();
        let (a, b) = (n.read_lock(), n.read_lock());
        assert!(n.is_held() && !n.is_write_locked());
        n.read_unlock(a);
        n.read_unlock(b);
        let t = n.write_lock();
        assert!(n.is_write_locked());
        n.write_unlock(t);
        assert!(!n.is_held());
    }

    #[test]
    fn a_leaf_waits_for_a_write_locked_ancestor() {
        let (root, leaf) = (NodeLock::new(), NodeLock::new());
        std::thread::scope(|s| {
            let g = lock_cover(&root, &[], |_| {});
            let h = s.spawn(|| {
                let _l = lock_leaf(&leaf, &[&root]);
                root.is_write_locked()
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!h.is_finished(), "the fault got in under a covering writer");
            drop(g);
            assert!(!h.join().unwrap());
        });
        assert!(!leaf.is_held());
    }
}
