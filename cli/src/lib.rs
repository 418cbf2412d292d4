//! The `switchyard` command's pieces: arguments, `get` (curl's flags, exit
//! codes, redirects, `-w`, HAR), `demo`, `warm`, `gateway`, timelines.
// A command-line tool prints by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod args;
pub mod config;
pub mod cookie;
pub mod demo;
pub mod exit;
pub mod form;
pub mod gateway;
pub mod get;
pub mod glob;
pub mod har;
pub mod netrc;
pub mod record;
pub mod redirect;
pub mod request;
pub mod timeline;
pub mod transfer;
pub mod warm;
pub mod write_out;
