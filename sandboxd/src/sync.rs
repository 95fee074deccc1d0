//! The one way the host takes a lock: a poisoned lock (a panic while
//! holding it) is taken anyway, since every critical section leaves its data
//! whole.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
