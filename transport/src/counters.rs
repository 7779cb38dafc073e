//! Device counters: rxe's hw_counters names first, then ferroce's counters for hostile or
//! unexpected input. Every name is stable; `iter` yields them in declaration order.

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Event counts of one endpoint.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$m])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter name, in order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            /// (name, value) pairs in order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name),)*].into_iter()
            }

            /// The value of the counter called `name`.
            pub fn get(&self, name: &str) -> Option<u64> {
                self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
            }
        }
    };
}

counters! {
    /// Packets handed out by `poll_transmit`.
    sent_pkts,
    /// Packets accepted for a QP (ICRC, address and key checks passed).
    rcvd_pkts,
    /// IP bytes (IP header through ICRC) handed out by `poll_transmit`.
    sent_bytes,
    /// Payload bytes of SEND and WRITE packets executed in sequence by responders (RC and
    /// UC; duplicates and dropped messages excluded): the receiving side's goodput.
    rcvd_data_bytes,
    /// Requests with a PSN before the expected one.
    duplicate_request,
    /// Requests with a PSN after the expected one.
    out_of_seq_request,
    /// RNR NAKs received.
    rcvd_rnr_err,
    /// RNR NAKs sent.
    send_rnr_err,
    /// PSN sequence error NAKs received.
    rcvd_seq_err,
    /// Requests executed without sending an ACK (no AckReq; coalesced).
    ack_deferred,
    /// Work requests failed with RetryExcErr.
    retry_exceeded_err,
    /// Work requests failed with RnrRetryExcErr.
    retry_rnr_exceeded_err,
    /// Go-back-N retries started (timeout, sequence NAK or implicit NAK).
    completer_retry_err,
    /// Send work requests completed in error (flushes excluded).
    send_err,
    /// RDMA WRITE and READ requests started by a requester.
    rdma_sends,
    /// RDMA WRITE and READ requests executed by a responder.
    rdma_recvs,
    /// Packets sent again by go-back-N or an RNR retry.
    retransmitted_pkts,
    /// Local ACK timeouts that fired.
    ack_timeouts,
    /// Datagrams whose ICRC did not match.
    rx_icrc_err,
    /// Datagrams that failed to parse (IP, UDP, BTH or extension headers).
    rx_malformed,
    /// Packets to a destination GID that is not ours.
    rx_unknown_gid,
    /// Packets to a QP number that does not exist.
    rx_unknown_qp,
    /// Packets to a multicast group whose BTH does not name the multicast QP, or to the
    /// multicast QP with a destination that is no group.
    rx_bad_mcast,
    /// Packets to a multicast group no QP here is attached to.
    rx_mcast_no_group,
    /// Packets to a group delivered to its attached QPs (each QP's copy counts in
    /// `rcvd_pkts`).
    mcast_rcv_packets,
    /// UD packets whose Q_Key did not match.
    rx_bad_qkey,
    /// Packets whose P_Key did not match.
    rx_bad_pkey,
    /// Packets to a QP in a state that cannot take them.
    rx_bad_state,
    /// Packets whose opcode does not fit the QP's service.
    rx_bad_opcode,
    /// RC/UC packets from an address other than the QP's peer.
    rx_bad_src,
    /// Packets sent by a responder that the requester did not expect.
    rx_unexpected_response,
    /// ACKs with a PSN outside the outstanding range (ghosts).
    rx_ghost_ack,
    /// ACKs and responses already processed.
    rx_duplicate_ack,
    /// UC/UD packets dropped because no receive WQE was posted.
    rx_no_recv_wqe,
    /// UC packets dropped as part of an incomplete message.
    rx_uc_dropped,
    /// Duplicate READ or atomic requests with no matching responder resource.
    rx_dup_unknown,
    /// Duplicate READs asking for bytes outside the original request (NAKed).
    rx_dup_read_outside,
    /// Duplicate READs dropped while the READ's response stream was still being sent.
    rx_dup_read_busy,
    /// Requests ahead of the expected PSN by more than a requester can have in flight:
    /// dropped without a sequence NAK (blind spoofing).
    rx_psn_out_of_window,
    /// READ and WRITE requests whose DMA length exceeds 2^31 (NAKed).
    rx_dma_len_too_long,
    /// SENDs with invalidate naming an ordinary region (refused, as in rxe).
    rx_invalidate_refused,
    /// IPv4 datagrams whose header checksum is wrong (the ICRC does not cover it).
    rx_ip_csum_err,
    /// CNPs received (valid ICRC and P_Key), handled or not.
    rx_cnp,
    /// Packets accepted for a QP that arrived ECN-marked CE (mlx5's name).
    np_ecn_marked_roce_packets,
    /// CNPs sent by notification points (mlx5's name).
    np_cnp_sent,
    /// CNPs that reached a reaction point and drove its rate (mlx5's name).
    rp_cnp_handled,
    /// CNPs for a QP that does not exist, has no congestion control, or is connected to
    /// another peer (mlx5's name).
    rp_cnp_ignored,
    /// NAKs sent (all kinds, RNR included).
    naks_sent,
    /// Packets dropped because a bounded queue was full.
    tx_queue_full,
    /// `poll_transmit` buffers too small for the next packet.
    tx_buf_too_small,
    /// Packets whose payload was folded into the ICRC while it was copied into the frame
    /// (`ferroce_wire::icrc_fold`).
    tx_icrc_folded,
    /// Completions dropped because their CQ was full.
    cq_overflow,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_iterable() {
        let c = Counters {
            rx_icrc_err: 3,
            ..Default::default()
        };
        assert_eq!(Counters::NAMES[0], "sent_pkts");
        assert!(Counters::NAMES.contains(&"retry_rnr_exceeded_err"));
        assert_eq!(c.get("rx_icrc_err"), Some(3));
        assert_eq!(c.get("nope"), None);
        assert_eq!(c.iter().count(), Counters::NAMES.len());
    }
}
