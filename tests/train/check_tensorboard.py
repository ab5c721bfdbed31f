#!/usr/bin/env python3
"""Decodes loom's TensorBoard event file in RUN_DIR independently of loom and compares every
scalar with RUN_DIR/metrics.jsonl.

The TFRecord framing and the protocol-buffer wire format are parsed here by hand (a bitwise
CRC-32C, varints, fixed32/fixed64 and length-delimited fields); when Debian's python3-protobuf
is installed, each record is also parsed by Google's protobuf runtime from a descriptor of the
Event/Summary/Value fields built below, and both decodings must agree.

Values: loom converts each metrics.jsonl number (a double) to float32 once, rounding to nearest,
and stores those 4 bytes; converting the JSON double to float32 here gives the same float, so
the comparison is exact.

usage: check_tensorboard.py RUN_DIR [START_TIME]   (exit 1 with one line per problem)
"""
import glob
import json
import math
import os
import struct
import sys
import time


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos = 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError(f"truncated record header at byte {pos}")
        head = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (crc_len,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if crc_len != masked(head):
            raise ValueError(f"bad length CRC at byte {pos}")
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(blob):
            raise ValueError(f"truncated record at byte {pos}")
        (crc_data,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if crc_data != masked(data):
            raise ValueError(f"bad data CRC at byte {pos}")
        yield data
        pos += 16 + length


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(buf):
    """(field number, wire type, raw value) of each field of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if pos > len(buf):
            raise ValueError(f"field {number} runs past the end of its message")
        yield number, wire, value


def decode_event(buf):
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": None, "session": None}
    for number, wire, value in fields(buf):
        if (number, wire) == (1, 1):
            ev["wall_time"] = struct.unpack("<d", value)[0]
        elif (number, wire) == (2, 0):
            ev["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif (number, wire) == (3, 2):
            ev["file_version"] = value.decode()
        elif (number, wire) == (7, 2):  # SessionLog: status (1, an enum: START is 1)
            ev["session"] = 0
            for n2, w2, v2 in fields(value):
                if (n2, w2) != (1, 0):
                    raise ValueError(f"SessionLog field {n2} (wire type {w2})")
                ev["session"] = v2
        elif (number, wire) == (5, 2):
            ev["values"] = []
            for n2, w2, v2 in fields(value):
                if (n2, w2) != (1, 2):
                    raise ValueError(f"Summary field {n2} (wire type {w2})")
                tag, simple = None, None
                for n3, w3, v3 in fields(v2):
                    if (n3, w3) == (1, 2):
                        tag = v3.decode()
                    elif (n3, w3) == (2, 5):
                        simple = struct.unpack("<f", v3)[0]
                    else:
                        raise ValueError(f"Summary.Value field {n3} (wire type {w3})")
                ev["values"].append((tag, simple))
        else:
            raise ValueError(f"Event field {number} (wire type {wire})")
    return ev


def protobuf_decoder():
    """Event parsing by Google's protobuf runtime, or None when python3-protobuf is missing."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        return None
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="loom_check_event.proto", package="check",
                                           syntax="proto3")

    def message(name, specs):
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in specs:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Value", [("tag", 1, F.TYPE_STRING, opt, None),
                      ("simple_value", 2, F.TYPE_FLOAT, opt, None)])
    message("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".check.Value")])
    message("SessionLog", [("status", 1, F.TYPE_INT32, opt, None)])  # an enum on the wire
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None),
                      ("step", 2, F.TYPE_INT64, opt, None),
                      ("file_version", 3, F.TYPE_STRING, opt, None),
                      ("summary", 5, F.TYPE_MESSAGE, opt, ".check.Summary"),
                      ("session_log", 7, F.TYPE_MESSAGE, opt, ".check.SessionLog")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    Event = message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("check.Event"))

    def decode(buf):
        e = Event()
        e.ParseFromString(buf)
        return {"wall_time": e.wall_time, "step": e.step,
                "file_version": e.file_version if e.file_version else None,
                "values": [(v.tag, v.simple_value) for v in e.summary.value]
                if e.HasField("summary") else None,
                "session": e.session_log.status if e.HasField("session_log") else None}
    return decode


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(line):
    """The tags loom's event file must hold for one metrics.jsonl line."""
    if "event" in line or "step" not in line:
        return []
    if "val_loss" in line:
        return [("val/loss", line["val_loss"])]
    if "loss" not in line:
        return []
    out = []
    for k in ("loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "mfu", "mem_peak_bytes",
              "loss_scale"):
        if line.get(k) is not None:
            out.append(("train/" + k, line[k]))
    for k, v in line.get("time", {}).items():
        out.append(("time/" + k, v))
    return out


def main():
    run_dir = sys.argv[1]
    start = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    problems = []
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if len(files) != 1:
        print(f"FAIL: expected one events.out.tfevents.* file in {run_dir}, found {files}")
        return 1
    with open(files[0], "rb") as fh:
        blob = fh.read()
    hand = [decode_event(r) for r in records(blob)]
    pb = protobuf_decoder()
    if pb is None:
        print("note: python3-protobuf is not installed; hand decoder only")
    else:
        for i, (r, h) in enumerate(zip(records(blob), hand)):
            if pb(r) != h:
                problems.append(f"record {i}: protobuf runtime {pb(r)} != hand decoder {h}")
    if not hand or hand[0]["file_version"] != "brain.Event:2" or hand[0]["values"] is not None:
        problems.append(f"first record is not file_version brain.Event:2: {hand[:1]}")
    now = time.time()
    for i, ev in enumerate(hand):
        if ev["wall_time"] is None or not start - 1 <= ev["wall_time"] <= now + 1:
            problems.append(f"record {i}: wall_time {ev['wall_time']} outside [{start}, {now}]")
    # A resumed run's file: a session START at the first step it logs, right after file_version
    # (TensorBoard then drops that step and later ones from the earlier files).
    body = hand[1:]
    if body and body[0]["session"] is not None:
        start_ev = body.pop(0)
        first = next((ev["step"] for ev in body), None)
        if start_ev["session"] != 1 or start_ev["values"] is not None or (
                first is not None and start_ev["step"] > first):
            problems.append(f"session record {start_ev} is not a START at or before step {first}")
        print(f"session START at step {start_ev['step']}")
    got = [(ev["step"], tag, v) for ev in body for tag, v in (ev["values"] or [])]
    if any(ev["values"] is None or not ev["values"] or ev["session"] is not None for ev in body):
        problems.append("a record after the first (and a resume's START) holds no scalars")
    want = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        for text in fh:
            line = json.loads(text)
            want += [(line["step"], tag, v) for tag, v in expected_scalars(line)]
    if [(s, t) for s, t, _ in got] != [(s, t) for s, t, _ in want]:
        problems.append(f"(step, tag) sequence differs:\n  events  {[(s, t) for s, t, _ in got]}"
                        f"\n  metrics {[(s, t) for s, t, _ in want]}")
    for (step, tag, v), (_, _, w) in zip(got, want):
        if not (v == f32(w) or (math.isnan(v) and math.isnan(w))):
            problems.append(f"step {step} {tag}: event {v!r} != float32(metrics {w!r}) {f32(w)!r}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    tags = sorted({t for _, t, _ in got})
    print(f"ok   {len(hand)} records, {len(got)} scalars over {len({s for s, _, _ in got})} steps "
          f"equal metrics.jsonl; tags {tags}" + ("" if pb is None else "; protobuf agrees"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
