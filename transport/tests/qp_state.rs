//! The ibv_modify_qp state machine and verbs argument checks.

use ferroce_transport::testing::{create, QpOpts, Sim};
use ferroce_transport::{
    Access, AddressVector, Endpoint, EndpointConfig, Error, Instant, Mtu, QpAttr, QpAttrMask as M,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, WrOpcode,
};

fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::REMOTE_WRITE,
        ..QpAttr::default()
    }
}

#[test]
fn transitions_follow_the_table() {
    let mut sim = Sim::new(1, 2, false);
    let s = create(&mut sim, 0, &QpOpts::default());
    let ep = &mut sim.nodes[0];
    let q = s.qpn;
    assert!(
        (2..=0xff_ffff).contains(&q),
        "QP numbers are random, never 0 or 1"
    );
    // RESET -> RTR skips INIT.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    assert_eq!(
        ep.modify_qp(sim.now, q, &rtr, M::STATE),
        Err(Error::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Rtr
        })
    );
    // RESET -> INIT needs PKEY_INDEX, PORT and ACCESS_FLAGS on RC.
    assert_eq!(
        ep.modify_qp(sim.now, q, &init_attr(), M::STATE | M::PKEY_INDEX | M::PORT),
        Err(Error::MissingAttr(M::ACCESS_FLAGS))
    );
    // QKEY is a UD attribute.
    assert_eq!(
        ep.modify_qp(
            sim.now,
            q,
            &init_attr(),
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS | M::QKEY
        ),
        Err(Error::UnexpectedAttr(M::QKEY))
    );
    let bad_port = QpAttr {
        port_num: 2,
        ..init_attr()
    };
    assert_eq!(
        ep.modify_qp(
            sim.now,
            q,
            &bad_port,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
        ),
        Err(Error::InvalidAttr("port_num"))
    );
    ep.modify_qp(
        sim.now,
        q,
        &init_attr(),
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .unwrap();
    assert_eq!(ep.qp_state(q).unwrap(), QpState::Init);
    // Posting a send before RTS is refused; a receive is fine.
    assert_eq!(
        ep.post_send(sim.now, q, &SendWr::default()),
        Err(Error::InvalidState(QpState::Init))
    );
    ep.post_recv(sim.now, q, &RecvWr::default()).unwrap();
    // INIT -> RTR on RC needs the AV, MTU, QPN, PSN and responder resources.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        av: AddressVector::new(sim_gid()),
        dest_qp_num: 0x12,
        path_mtu: Mtu::Mtu1024,
        ..QpAttr::default()
    };
    let ep = &mut sim.nodes[0];
    let need = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC;
    assert_eq!(
        ep.modify_qp(sim.now, q, &rtr, M::STATE | need),
        Err(Error::MissingAttr(M::MIN_RNR_TIMER))
    );
    let bad = QpAttr {
        max_dest_rd_atomic: 200,
        ..rtr
    };
    assert_eq!(
        ep.modify_qp(sim.now, q, &bad, M::STATE | need | M::MIN_RNR_TIMER),
        Err(Error::InvalidAttr("max_dest_rd_atomic"))
    );
    let bad = QpAttr {
        av: AddressVector {
            sgid_index: 3,
            ..rtr.av
        },
        ..rtr
    };
    assert_eq!(
        ep.modify_qp(sim.now, q, &bad, M::STATE | need | M::MIN_RNR_TIMER),
        Err(Error::InvalidAttr("sgid_index"))
    );
    assert_eq!(
        ep.modify_qp(
            sim.now,
            q,
            &rtr,
            M::STATE | need | M::MIN_RNR_TIMER | M::ALT_PATH
        ),
        Err(Error::Unsupported("automatic path migration"))
    );
    ep.modify_qp(sim.now, q, &rtr, M::STATE | need | M::MIN_RNR_TIMER)
        .unwrap();
    // CUR_STATE must match.
    let rts = QpAttr {
        qp_state: QpState::Rts,
        cur_qp_state: QpState::Init,
        retry_cnt: 9,
        ..QpAttr::default()
    };
    let need = M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    assert_eq!(
        ep.modify_qp(sim.now, q, &rts, M::STATE | M::CUR_STATE | need),
        Err(Error::StateMismatch {
            expected: QpState::Init,
            actual: QpState::Rtr
        })
    );
    assert_eq!(
        ep.modify_qp(sim.now, q, &rts, M::STATE | need),
        Err(Error::InvalidAttr("retry_cnt"))
    );
    let rts = QpAttr {
        retry_cnt: 7,
        sq_psn: 0x1ff_ffff,
        ..rts
    };
    ep.modify_qp(sim.now, q, &rts, M::STATE | need).unwrap();
    let (attr, init) = ep.query_qp(q).unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.sq_psn, 0xff_ffff, "PSNs keep 24 bits");
    assert_eq!(init.qp_type, QpType::Rc);
    // RTS -> SQD -> RTS, RTS -> RTR is not allowed, any -> ERR and ERR -> RESET are.
    ep.modify_qp(
        sim.now,
        q,
        &QpAttr {
            qp_state: QpState::Sqd,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    ep.modify_qp(
        sim.now,
        q,
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    assert!(ep
        .modify_qp(
            sim.now,
            q,
            &QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            },
            M::STATE
        )
        .is_err());
    ep.modify_qp(
        sim.now,
        q,
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    let mut wcs = Vec::new();
    ep.poll_cq(s.cq, &mut wcs, 10);
    assert_eq!(wcs.len(), 1, "the posted receive is flushed");
    ep.modify_qp(
        sim.now,
        q,
        &QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    assert_eq!(ep.qp_state(q).unwrap(), QpState::Reset);
    assert!(ep.post_recv(sim.now, q, &RecvWr::default()).is_err());
}

fn sim_gid() -> std::net::Ipv6Addr {
    ferroce_transport::testing::node_gid(1)
}

#[test]
fn verbs_argument_checks() {
    let mut ep = Endpoint::new(EndpointConfig {
        local_gids: vec![sim_gid()],
        port_mtu: Mtu::Mtu1024,
        ..Default::default()
    });
    let pd = ep.alloc_pd();
    assert_eq!(
        ep.reg_mr(pd, 8, Access::REMOTE_WRITE),
        Err(Error::InvalidAccess)
    );
    let cq = ep.create_cq(16).unwrap();
    assert_eq!(ep.create_cq(0), Err(Error::InvalidCq));
    let cap = QpCap {
        max_send_wr: 2,
        max_send_sge: 1,
        ..QpCap::default()
    };
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: cq,
        recv_cq: cq,
        cap,
        sq_sig_all: true,
        srq: None,
    };
    let q = ep.create_qp(pd, init).unwrap();
    assert_eq!(
        ep.query_qp(q).unwrap().0.path_mtu,
        Mtu::Mtu1024,
        "UD uses the port MTU"
    );
    assert_eq!(ep.dealloc_pd(pd), Err(Error::PdInUse));
    assert_eq!(ep.destroy_cq(cq), Err(Error::CqInUse));
    let m = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
    ep.modify_qp(
        Instant::ZERO,
        q,
        &QpAttr {
            qp_state: QpState::Init,
            ..QpAttr::default()
        },
        m,
    )
    .unwrap();
    ep.modify_qp(
        Instant::ZERO,
        q,
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    ep.modify_qp(
        Instant::ZERO,
        q,
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        M::STATE | M::SQ_PSN,
    )
    .unwrap();
    let mr = ep.reg_mr(pd, 64, Access::LOCAL_WRITE).unwrap();
    let sge = Sge {
        addr: mr.addr,
        length: 8,
        lkey: mr.lkey,
    };
    let wr = SendWr {
        opcode: WrOpcode::Send,
        sg_list: vec![sge, sge],
        ud: Some(ferroce_transport::UdDest::new(sim_gid(), 0x20, 1)),
        ..Default::default()
    };
    assert_eq!(ep.post_send(Instant::ZERO, q, &wr), Err(Error::TooManySge));
    let one = SendWr {
        sg_list: vec![sge],
        ..wr
    };
    ep.post_send(Instant::ZERO, q, &one).unwrap();
    ep.post_send(Instant::ZERO, q, &one).unwrap();
    assert_eq!(ep.post_send(Instant::ZERO, q, &one), Err(Error::QueueFull));
    assert_eq!(
        ep.post_send(Instant::ZERO, 0x999, &one),
        Err(Error::InvalidQp(0x999))
    );
    ep.destroy_qp(q).unwrap();
    ep.destroy_cq(cq).unwrap();
    ep.dereg_mr(mr.lkey).unwrap();
    ep.dealloc_pd(pd).unwrap();
}
