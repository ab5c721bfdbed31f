// TensorBoard event files written by hand: core/proto_wire.h for the protocol buffers,
// core/crc32c.h for the record checksums; no TensorFlow or protobuf library.
#include "train/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "core/check.h"
#include "core/crc32c.h"
#include "core/proto_wire.h"

namespace loom {

namespace {
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Event fields and Summary / Summary.Value fields (event.proto, summary.proto).
enum : int { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7 };
enum : int { kSummaryValue = 1, kTag = 1, kSimpleValue = 2 };
enum : int { kSessionStatus = 1, kStatusStart = 1 };  // SessionLog.status, START

void add(Scalars& s, const std::string& tag, const nlohmann::ordered_json& v) {
  if (v.is_number()) s.emplace_back(tag, v.get<float>());
}
}  // namespace

std::string tfrecord(const std::string& data) {
  std::string len;
  put_le(len, data.size(), 8);
  std::string rec = len;
  put_le(rec, masked_crc32c(len.data(), len.size()), 4);
  rec += data;
  put_le(rec, masked_crc32c(data.data(), data.size()), 4);
  return rec;
}

std::string event_file_version(double wall_time, const std::string& version) {
  ProtoWriter e;
  e.float64(kWallTime, wall_time);
  e.bytes(kFileVersion, version);
  return e.data();
}

std::string event_scalars(double wall_time, int64_t step, const Scalars& values) {
  ProtoWriter summary;
  for (const auto& [tag, v] : values) {
    ProtoWriter value;
    value.bytes(kTag, tag);
    value.float32(kSimpleValue, v);
    summary.bytes(kSummaryValue, value.data());
  }
  ProtoWriter e;
  e.float64(kWallTime, wall_time);
  e.varint(kStep, uint64_t(step));  // int64: two's complement as a varint
  e.bytes(kSummary, summary.data());
  return e.data();
}

std::string event_session_start(double wall_time, int64_t step) {
  ProtoWriter log;
  log.varint(kSessionStatus, kStatusStart);
  ProtoWriter e;
  e.float64(kWallTime, wall_time);
  e.varint(kStep, uint64_t(step));
  e.bytes(kSessionLog, log.data());
  return e.data();
}

Scalars tensorboard_scalars(const nlohmann::ordered_json& line) {
  Scalars s;
  if (!line.contains("step") || line.contains("event")) return s;
  if (line.contains("val_loss")) {
    add(s, "val/loss", line.at("val_loss"));
    return s;
  }
  if (!line.contains("loss")) return s;
  for (const char* k : {"loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "mfu",
                        "mem_peak_bytes", "loss_scale"})
    if (line.contains(k)) add(s, std::string("train/") + k, line.at(k));
  if (line.contains("time"))
    for (const auto& [k, v] : line.at("time").items()) add(s, "time/" + k, v);
  return s;
}

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir, int64_t start_step) {
  const bool fresh = start_step == 0;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw UserError(str("run.dir: cannot create '", run_dir, "': ", ec.message()));
  if (fresh)
    for (const auto& e : fs::directory_iterator(run_dir, ec))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
        fs::remove(e.path(), ec);
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const double t = now_seconds();
  path_ = str(run_dir, "/events.out.tfevents.", int64_t(t), ".", host);
  if (fs::exists(path_)) path_ += str(".", int64_t(getpid()));
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_)
    throw UserError(str("log.tensorboard: cannot write '", path_,
                        "' (check that run.dir is writable, or set log.tensorboard: false)"));
  append(event_file_version(t, "brain.Event:2"));
  if (!fresh) append(event_session_start(t, start_step + 1));
}

void TensorBoardWriter::write(const nlohmann::ordered_json& line) {
  const Scalars s = tensorboard_scalars(line);
  if (s.empty()) return;
  append(event_scalars(now_seconds(), line.at("step").get<int64_t>(), s));
}

void TensorBoardWriter::append(const std::string& event) {
  out_ << tfrecord(event);
  out_.flush();
}

}  // namespace loom
