//! The loom switch: one import path for every concurrency primitive the locks use.
//!
//! Built normally, everything here is `std`. Built with `RUSTFLAGS="--cfg loom"`, the
//! same names resolve to [`loom`](https://docs.rs/loom) mocks, so the model tests in
//! `tests/loom.rs` explore every interleaving (and the weak-memory reorderings loom
//! models) of the *real* lock code, not of a copy written for the test.
//!
//! Code in this crate must therefore never name `std::sync::atomic`, `std::cell::UnsafeCell`,
//! `std::thread` or `std::hint::spin_loop` directly for lock state or protected data.
//! The only deliberate exceptions are the instrumentation counters in [`crate::stats`]:
//! they are observational, are off by default, and modelling them would only enlarge
//! the state space loom must explore.
//!
//! # `UnsafeCell` API
//!
//! [`cell::UnsafeCell`] follows loom's API (as tokio's internal loom shim does), so the
//! locks hand out *tracked* pointers:
//!
//! * [`cell::UnsafeCell::get`] returns a [`cell::ConstPtr`] and
//!   [`cell::UnsafeCell::get_mut`] a [`cell::MutPtr`]. Under loom, a shared (resp.
//!   exclusive) access to the cell is considered in progress for as long as that pointer
//!   object is alive, and loom panics if two accesses are not ordered by happens-before.
//!   The lock guards keep such a pointer for exactly the duration of the critical
//!   section and drop it *before* releasing the lock word.
//! * [`cell::UnsafeCell::with`] / [`cell::UnsafeCell::with_mut`] give a raw pointer to a
//!   closure for one-off accesses.
//! * [`cell::UnsafeCell::get_exclusive`] is the `&mut self` accessor behind the locks'
//!   `get_mut`: exclusivity is proven by the borrow checker, so nothing is tracked.
//!
//! In the `std` build the pointer types are plain raw-pointer newtypes and every method
//! is `#[inline]`, so the abstraction costs nothing.

/// Atomic integer, pointer and fence types (`std::sync::atomic` or `loom::sync::atomic`).
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{
        AtomicBool, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        fence,
    };
    #[cfg(not(loom))]
    pub use std::sync::atomic::{
        AtomicBool, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
        fence,
    };
}

/// Thread spawning and yielding (`std::thread` or `loom::thread`).
pub mod thread {
    #[cfg(loom)]
    pub use loom::thread::{JoinHandle, spawn, yield_now};
    #[cfg(not(loom))]
    pub use std::thread::{JoinHandle, spawn, yield_now};
}

/// Busy-wait hint (`std::hint::spin_loop`, or loom's, which yields to the model scheduler).
pub mod hint {
    #[cfg(loom)]
    pub use loom::hint::spin_loop;
    #[cfg(not(loom))]
    pub use std::hint::spin_loop;
}

#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(not(loom))]
pub use std::sync::Arc;

/// An `UnsafeCell` whose accesses loom can check for data races.
pub mod cell {
    #[cfg(loom)]
    pub use self::loom_impl::*;
    #[cfg(not(loom))]
    pub use self::std_impl::*;

    #[cfg(not(loom))]
    mod std_impl {
        /// Interior-mutable cell; see the [module docs](super::super) for the API contract.
        #[derive(Debug, Default)]
        #[repr(transparent)]
        pub struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

        impl<T> UnsafeCell<T> {
            /// Wraps `value`.
            #[inline]
            pub const fn new(value: T) -> Self {
                Self(core::cell::UnsafeCell::new(value))
            }

            /// Unwraps the value.
            #[inline]
            pub fn into_inner(self) -> T {
                self.0.into_inner()
            }
        }

        impl<T: ?Sized> UnsafeCell<T> {
            /// Starts a shared access; it lasts as long as the returned pointer.
            #[inline]
            pub fn get(&self) -> ConstPtr<T> {
                ConstPtr(self.0.get())
            }

            /// Starts an exclusive access; it lasts as long as the returned pointer.
            #[inline]
            pub fn get_mut(&self) -> MutPtr<T> {
                MutPtr(self.0.get())
            }

            /// Runs `f` with a pointer for a shared access.
            #[inline]
            pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
                f(self.0.get())
            }

            /// Runs `f` with a pointer for an exclusive access.
            #[inline]
            pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
                f(self.0.get())
            }

            /// Safe exclusive access through `&mut self`.
            #[inline]
            pub fn get_exclusive(&mut self) -> &mut T {
                self.0.get_mut()
            }
        }

        /// Pointer for a shared access (a `*const T` in the `std` build).
        #[derive(Debug)]
        pub struct ConstPtr<T: ?Sized>(*const T);

        impl<T: ?Sized> ConstPtr<T> {
            /// Dereferences the pointer.
            ///
            /// # Safety
            ///
            /// As for dereferencing a `*const T`: the cell must be alive and no exclusive
            /// access to it may be in progress for the returned lifetime.
            #[inline]
            pub unsafe fn deref(&self) -> &T {
                // SAFETY: forwarded to the caller (see `# Safety`).
                unsafe { &*self.0 }
            }

            /// Runs `f` with the raw pointer (which must not escape `f`).
            #[inline]
            pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
                f(self.0)
            }
        }

        /// Pointer for an exclusive access (a `*mut T` in the `std` build).
        #[derive(Debug)]
        pub struct MutPtr<T: ?Sized>(*mut T);

        impl<T: ?Sized> MutPtr<T> {
            /// Dereferences the pointer mutably.
            ///
            /// # Safety
            ///
            /// As for dereferencing a `*mut T`: the cell must be alive and no other access
            /// to it may be in progress for the returned lifetime.
            #[inline]
            #[allow(clippy::mut_from_ref)] // models a raw pointer, like loom's MutPtr
            pub unsafe fn deref(&self) -> &mut T {
                // SAFETY: forwarded to the caller (see `# Safety`).
                unsafe { &mut *self.0 }
            }

            /// Runs `f` with the raw pointer (which must not escape `f`).
            #[inline]
            pub fn with<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
                f(self.0)
            }
        }
    }

    #[cfg(loom)]
    mod loom_impl {
        pub use loom::cell::{ConstPtr, MutPtr};

        /// Interior-mutable cell backed by `loom::cell::UnsafeCell`.
        #[derive(Debug, Default)]
        pub struct UnsafeCell<T: ?Sized>(loom::cell::UnsafeCell<T>);

        impl<T> UnsafeCell<T> {
            /// Wraps `value`.
            pub fn new(value: T) -> Self {
                Self(loom::cell::UnsafeCell::new(value))
            }

            /// Unwraps the value.
            pub fn into_inner(self) -> T {
                self.0.into_inner()
            }
        }

        impl<T: ?Sized> UnsafeCell<T> {
            /// Starts a tracked shared access; it lasts as long as the returned pointer.
            #[track_caller]
            pub fn get(&self) -> ConstPtr<T> {
                self.0.get()
            }

            /// Starts a tracked exclusive access; it lasts as long as the returned pointer.
            #[track_caller]
            pub fn get_mut(&self) -> MutPtr<T> {
                self.0.get_mut()
            }

            /// Runs `f` with a pointer for a tracked shared access.
            #[track_caller]
            pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
                self.0.with(f)
            }

            /// Runs `f` with a pointer for a tracked exclusive access.
            #[track_caller]
            pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
                self.0.with_mut(f)
            }

            /// Exclusive access through `&mut self` (not tracked: the borrow proves it).
            pub fn get_exclusive(&mut self) -> &mut T {
                // SAFETY: `&mut self` guarantees no other access to the cell exists for
                // the returned lifetime, so escaping the pointer from the closure is sound.
                self.0.with_mut(|p| unsafe { &mut *p })
            }
        }
    }
}
