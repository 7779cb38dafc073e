//! RTU (IBA Table 111) and DREP (Table 113): the two messages that are nothing but both
//! communication IDs and 224 bytes of private data.

use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const PRIVATE: usize = 8;
}

/// Bytes of private data an RTU or DREP carries.
pub const PRIVATE_LEN: usize = 224;

macro_rules! ids_and_private {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            /// The sender's communication ID.
            pub local_comm_id: u32,
            /// The other side's.
            pub remote_comm_id: u32,
            /// Private data, whole.
            pub private_data: [u8; PRIVATE_LEN],
        }

        impl Default for $name {
            fn default() -> $name {
                $name {
                    local_comm_id: 0,
                    remote_comm_id: 0,
                    private_data: [0; PRIVATE_LEN],
                }
            }
        }

        impl $name {
            pub(crate) fn parse(d: &[u8]) -> $name {
                $name {
                    local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
                    remote_comm_id: u32_at(d, field::REMOTE_COMM_ID),
                    private_data: super::private(d, field::PRIVATE),
                }
            }

            pub(crate) fn emit(&self, d: &mut [u8]) {
                put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
                put_u32(d, field::REMOTE_COMM_ID, self.remote_comm_id);
                d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN]
                    .copy_from_slice(&self.private_data);
            }
        }
    };
}

ids_and_private!(
    /// Ready to use: the active side took the REP and its QP is ready to send.
    Rtu
);
ids_and_private!(
    /// Disconnection reply.
    Drep
);
