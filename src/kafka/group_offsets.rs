//! librdkafka admin calls rust-rdkafka does not wrap, on a client strata already has; the one
//! place strata calls librdkafka's C API itself, with every object it creates destroyed on
//! every path.
//! - Many consumer groups' committed offsets: ListConsumerGroupOffsets takes one group per
//!   request, but any number of requests may be in flight on one client, so hundreds of groups
//!   cost a few round trips instead of a client (and its connections) per group.
//! - What the principal may do on the cluster (DescribeCluster with its authorized operations):
//!   without Describe there, Kafka lists only the groups the principal may describe, silently.

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

/// A group's committed offsets (topic, partition) -> offset, or why they could not be read.
pub type GroupOffsets = Result<BTreeMap<(String, i32), i64>, String>;

/// The committed offsets of every partition each group has offsets for, by group. Groups whose
/// answer did not come within `timeout` are reported as such.
pub fn list<C: ConsumerContext>(
    client: &BaseConsumer<C>,
    groups: &[String],
    timeout: Duration,
) -> BTreeMap<String, GroupOffsets> {
    let mut out: BTreeMap<String, GroupOffsets> = BTreeMap::new();
    let rk = Consumer::client(client).native_ptr();
    // SAFETY: `rk` is a live client for the whole call (borrowed); the queue, the request
    // objects and every event are destroyed below on every path; strings passed in outlive
    // the calls that copy them.
    unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        if queue.is_null() {
            for g in groups {
                out.insert(g.clone(), Err("librdkafka could not make a queue".into()));
            }
            return out;
        }
        let mut asked = 0usize;
        for g in groups {
            let Ok(name) = CString::new(g.as_str()) else {
                out.insert(g.clone(), Err("the group name holds a NUL byte".into()));
                continue;
            };
            // No partition list: every partition the group has offsets for.
            let mut req =
                rd::rd_kafka_ListConsumerGroupOffsets_new(name.as_ptr(), std::ptr::null());
            if req.is_null() {
                out.insert(g.clone(), Err("librdkafka refused the request".into()));
                continue;
            }
            rd::rd_kafka_ListConsumerGroupOffsets(rk, &mut req, 1, std::ptr::null(), queue);
            rd::rd_kafka_ListConsumerGroupOffsets_destroy(req);
            asked += 1;
        }
        let deadline = Instant::now() + timeout;
        let mut answered = 0usize;
        while answered < asked {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ev = rd::rd_kafka_queue_poll(queue, left.as_millis().min(1000) as i32);
            if ev.is_null() {
                continue;
            }
            if rd::rd_kafka_event_type(ev) == rd::RD_KAFKA_EVENT_LISTCONSUMERGROUPOFFSETS_RESULT {
                answered += 1;
                read_result(ev, &mut out);
            }
            rd::rd_kafka_event_destroy(ev);
        }
        rd::rd_kafka_queue_destroy(queue);
    }
    for g in groups {
        out.entry(g.clone())
            .or_insert_with(|| Err(format!("no answer within {} s", timeout.as_secs())));
    }
    out
}

/// Whether the principal may Describe the cluster (so a group listing shows every group), or
/// `None` when the broker does not say (an older broker).
pub fn may_describe_cluster<C: ConsumerContext>(
    client: &BaseConsumer<C>,
    timeout: Duration,
) -> Result<Option<bool>, String> {
    let rk = Consumer::client(client).native_ptr();
    // SAFETY: `rk` is a live client for the whole call (borrowed); the options, the queue and
    // the event are destroyed below on every path; the operations array belongs to the event
    // and is read before the event is destroyed.
    unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        if queue.is_null() {
            return Err("librdkafka could not make a queue".into());
        }
        let opts = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER,
        );
        if opts.is_null() {
            rd::rd_kafka_queue_destroy(queue);
            return Err("librdkafka refused the request".into());
        }
        let e = rd::rd_kafka_AdminOptions_set_include_authorized_operations(opts, 1);
        if !e.is_null() {
            rd::rd_kafka_error_destroy(e);
        }
        rd::rd_kafka_DescribeCluster(rk, opts, queue);
        rd::rd_kafka_AdminOptions_destroy(opts);
        let ev = rd::rd_kafka_queue_poll(queue, timeout.as_millis().min(i32::MAX as u128) as i32);
        let answer = if ev.is_null() {
            Err(format!("no answer within {} s", timeout.as_secs()))
        } else {
            let r = read_cluster_operations(ev);
            rd::rd_kafka_event_destroy(ev);
            r
        };
        rd::rd_kafka_queue_destroy(queue);
        answer
    }
}

/// Reads a DescribeCluster result event's authorized operations.
///
/// # Safety
/// `ev` must be a live event; nothing it points to is kept past the call.
unsafe fn read_cluster_operations(ev: *mut rd::rd_kafka_event_t) -> Result<Option<bool>, String> {
    if rd::rd_kafka_event_type(ev) != rd::RD_KAFKA_EVENT_DESCRIBECLUSTER_RESULT {
        return Err("librdkafka answered another call".into());
    }
    let err = rd::rd_kafka_event_error(ev);
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(text(rd::rd_kafka_event_error_string(ev)));
    }
    let res = rd::rd_kafka_event_DescribeCluster_result(ev);
    if res.is_null() {
        return Err("librdkafka gave no result".into());
    }
    let mut cnt = 0usize;
    let ops = rd::rd_kafka_DescribeCluster_result_authorized_operations(res, &mut cnt);
    // NULL: the broker did not say; a pointer with no operations: no rights at all.
    if ops.is_null() {
        return Ok(None);
    }
    let ops: Vec<u32> = (0..cnt).map(|i| *ops.add(i) as u32).collect();
    Ok(Some(grants_describe(&ops)))
}

/// Whether authorized operations (librdkafka's codes) include Describe: Describe itself, or
/// Alter or All, which imply it.
fn grants_describe(ops: &[u32]) -> bool {
    use rd::rd_kafka_AclOperation_t::*;
    let implied = [
        RD_KAFKA_ACL_OPERATION_DESCRIBE as u32,
        RD_KAFKA_ACL_OPERATION_ALTER as u32,
        RD_KAFKA_ACL_OPERATION_ALL as u32,
    ];
    ops.iter().any(|op| implied.contains(op))
}

/// Reads one ListConsumerGroupOffsets result event into `out`.
///
/// # Safety
/// `ev` must be a live event of that type; nothing it points to is kept past the call.
unsafe fn read_result(ev: *mut rd::rd_kafka_event_t, out: &mut BTreeMap<String, GroupOffsets>) {
    let err = rd::rd_kafka_event_error(ev);
    let res = rd::rd_kafka_event_ListConsumerGroupOffsets_result(ev);
    if res.is_null() {
        return;
    }
    let mut cnt = 0usize;
    let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(res, &mut cnt);
    if groups.is_null() {
        return;
    }
    for i in 0..cnt {
        let gr = *groups.add(i);
        let name = text(rd::rd_kafka_group_result_name(gr));
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            out.insert(name, Err(text(rd::rd_kafka_err2str(err))));
            continue;
        }
        let gerr = rd::rd_kafka_group_result_error(gr);
        if !gerr.is_null() {
            out.insert(name, Err(text(rd::rd_kafka_error_string(gerr))));
            continue;
        }
        let parts = rd::rd_kafka_group_result_partitions(gr);
        let mut offsets = BTreeMap::new();
        if !parts.is_null() {
            let list = &*parts;
            for j in 0..list.cnt.max(0) as usize {
                let e = &*list.elems.add(j);
                if e.err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && e.offset >= 0 {
                    offsets.insert((text(e.topic), e.partition), e.offset);
                }
            }
        }
        out.insert(name, Ok(offsets));
    }
}

/// A C string librdkafka owns, copied.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn text(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rd::rd_kafka_AclOperation_t::*;

    #[test]
    fn describe_is_granted_by_describe_alter_or_all() {
        assert!(grants_describe(&[RD_KAFKA_ACL_OPERATION_DESCRIBE as u32]));
        assert!(grants_describe(&[
            RD_KAFKA_ACL_OPERATION_CREATE as u32,
            RD_KAFKA_ACL_OPERATION_ALTER as u32
        ]));
        assert!(grants_describe(&[RD_KAFKA_ACL_OPERATION_ALL as u32]));
        assert!(!grants_describe(&[
            RD_KAFKA_ACL_OPERATION_CREATE as u32,
            RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION as u32,
            RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE as u32
        ]));
        assert!(!grants_describe(&[]));
    }
}
