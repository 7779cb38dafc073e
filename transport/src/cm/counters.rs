//! The CM's counters, named like Linux's `/sys/class/infiniband_cm/<dev>/<port>/` groups
//! (`cm_rx_msgs`, `cm_tx_msgs`, `cm_tx_retries`, `cm_rx_duplicates`) with the message type
//! after a dot, plus ferroce's counters of MADs it dropped and why.

/// The message types, in the order of the per-type arrays.
pub const KINDS: [&str; 9] = [
    "req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep",
];

/// Index of a message in [`KINDS`].
pub(crate) fn kind(m: &ferroce_wire::cm::Message) -> usize {
    use ferroce_wire::cm::Message::*;
    match m {
        Req(_) => 0,
        Mra(_) => 1,
        Rej(_) => 2,
        Rep(_) => 3,
        Rtu(_) => 4,
        Dreq(_) => 5,
        Drep(_) => 6,
        SidrReq(_) => 7,
        SidrRep(_) => 8,
    }
}

/// Counts of one connection manager.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// Messages taken in, by type.
    pub rx_msgs: [u64; 9],
    /// Messages sent (first sends and resends), by type.
    pub tx_msgs: [u64; 9],
    /// Resends after a timeout, by type.
    pub tx_retries: [u64; 9],
    /// Duplicates received (a resent REQ, REP or DREQ), by type.
    pub rx_duplicates: [u64; 9],
    /// MADs that are not CM messages ferroce reads (another class, version, method or
    /// attribute), or too short.
    pub rx_malformed: u64,
    /// Messages naming a communication ID no connection here has.
    pub rx_unknown_comm_id: u64,
    /// Messages for a connection that came from another GID than its peer's.
    pub rx_spoofed: u64,
    /// Messages the connection's state does not take (e.g. an RTU before any REP).
    pub rx_wrong_state: u64,
    /// DREQs naming another QP than the connection's.
    pub rx_qpn_mismatch: u64,
    /// REQs refused because nobody listens on their service ID.
    pub rej_no_listener: u64,
    /// This CM's own REQs, come back to it (lo, or an interface shared by processes),
    /// left to the other process there that listens on their service.
    pub rx_own: u64,
    /// REQs for a service nobody here listens on, left unanswered because another process
    /// on the interface listens on it.
    pub rx_no_listener: u64,
    /// REQs refused for a field ferroce does not support (transport, MTU).
    pub rej_unsupported: u64,
    /// REQs refused because the table of connections is full.
    pub rej_no_resources: u64,
    /// Requests (REQ or SIDR REQ) the user dropped unanswered, so that the peer's resend
    /// is taken as new: a listener whose backlog of unread requests is full.
    pub rx_dropped_backlog: u64,
    /// Connections given up after their last resend went unanswered.
    pub timeouts: u64,
}

impl CmCounters {
    /// (name, value) pairs: `cm_rx_msgs.req`, ..., then the drop counters.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let groups = [
            ("cm_rx_msgs", &self.rx_msgs),
            ("cm_tx_msgs", &self.tx_msgs),
            ("cm_tx_retries", &self.tx_retries),
            ("cm_rx_duplicates", &self.rx_duplicates),
        ];
        let per_kind = groups.into_iter().flat_map(|(g, a)| {
            KINDS
                .iter()
                .zip(a.iter())
                .map(move |(k, v)| (format!("{g}.{k}"), *v))
        });
        let single = [
            ("cm_rx_malformed", self.rx_malformed),
            ("cm_rx_unknown_comm_id", self.rx_unknown_comm_id),
            ("cm_rx_spoofed", self.rx_spoofed),
            ("cm_rx_wrong_state", self.rx_wrong_state),
            ("cm_rx_qpn_mismatch", self.rx_qpn_mismatch),
            ("cm_rej_no_listener", self.rej_no_listener),
            ("cm_rx_no_listener", self.rx_no_listener),
            ("cm_rx_own", self.rx_own),
            ("cm_rej_unsupported", self.rej_unsupported),
            ("cm_rej_no_resources", self.rej_no_resources),
            ("cm_rx_dropped_backlog", self.rx_dropped_backlog),
            ("cm_timeouts", self.timeouts),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v));
        per_kind.chain(single)
    }
}
