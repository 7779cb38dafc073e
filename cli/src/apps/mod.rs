//! Applications built on the verbs API, shared by the CLI and the tests.

pub mod cmatose;
pub mod mesh;
pub mod oob;
pub mod ops;
pub mod perftest;
pub mod pingpong;
pub mod rping;
pub mod udaddy;
