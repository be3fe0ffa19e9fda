//! [`Extensions`]: state a concern above the bus keeps per bus (the schedules of
//! `patterns/`), by type, so that the bus's own structs need not name it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One value of each type, made on first use.
#[derive(Default)]
pub(crate) struct Extensions(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    /// The bus's `T`, made with `T::default()` the first time it is asked for.
    pub(crate) fn get_or_default<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let value = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()) as Arc<dyn Any + Send + Sync>)
            .clone();
        drop(map);
        // The entry of `T`'s id was made from a `T`.
        value
            .downcast::<T>()
            .unwrap_or_else(|_| Arc::new(T::default()))
    }
}
