#![doc = include_str!("../README.md")]

mod context;
pub mod cpu;
mod error;
mod kernels;
mod ops;

pub use context::{ADAPTER_ENV, Context, NO_COOP_ENV, NO_SUBGROUPS_ENV};
pub use error::{Error, Result};
pub use kernels::{Dispatch, Kernel, Kernels, Q8Matrix, View, plan_row_split, row_split_step};
pub use ops::*;
