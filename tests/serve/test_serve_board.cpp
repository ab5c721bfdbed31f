// loom serve's request board (continuous batching: admission into free slots, cancels,
// progress), the tick's wire form, and how a sequence's ids render as API text.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "data_tools/tokenizer.h"
#include "serve/board.h"
#include "serve/http_api.h"

namespace loom::serve {
namespace {

std::shared_ptr<Job> job_of(int prompts, int max_tokens = 4) {
  auto j = std::make_shared<Job>();
  j->params.max_tokens = max_tokens;
  j->params.stop = {"END"};
  j->seed = 99;
  for (int i = 0; i < prompts; ++i) {
    SeqProgress p;
    p.prompt = {int32_t(10 + i), 20};
    j->seqs.push_back(p);
  }
  return j;
}

SeqUpdate upd(uint64_t id, int32_t token, int32_t count, Finish f = Finish::Running) {
  return SeqUpdate{id, token, -0.5f * float(count), count, f};
}

TEST(ServeBoard, AdmitsQueuedPromptsIntoFreeSlotsInOrder) {
  Board b(1, 2);  // one replica of two slots
  auto a = job_of(3), c = job_of(1);
  ASSERT_TRUE(b.submit(a));
  ASSERT_TRUE(b.submit(c));
  Tick t = b.next_tick(0);  // a's first two prompts fill the slots
  ASSERT_EQ(t.add.size(), 2u);
  EXPECT_TRUE(t.step);
  EXPECT_EQ(t.add[0].id, 0u);
  EXPECT_EQ(t.add[1].id, 1u);
  EXPECT_EQ(t.add[0].prompt, (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(t.add[1].stream, 1);  // the prompt's index in its request
  EXPECT_EQ(t.add[1].sample.seed, 99u);
  EXPECT_EQ(t.add[1].stop, std::vector<std::string>{"END"});
  EXPECT_EQ(t.add[1].max_tokens, 4);
  t = b.next_tick(0);  // no free slot: nothing enters
  EXPECT_TRUE(t.add.empty());
  // A step: sequence 0 gets its first id and finishes, 1 gets its first; 0's slot takes a's
  // third prompt.
  b.publish({upd(1, 5, 1), upd(0, 7, 1, Finish::Length)});
  EXPECT_EQ(a->finished, 1);
  EXPECT_EQ(a->seqs[0].out, std::vector<int32_t>{7});
  EXPECT_EQ(a->seqs[0].logprobs, std::vector<float>{-0.5f});
  EXPECT_EQ(a->seqs[0].finish, Finish::Length);
  EXPECT_EQ(a->seqs[1].out, std::vector<int32_t>{5});
  t = b.next_tick(0);
  ASSERT_EQ(t.add.size(), 1u);
  EXPECT_EQ(t.add[0].id, 2u);
  EXPECT_EQ(t.add[0].prompt, (std::vector<int32_t>{12, 20}));
  b.publish({upd(1, 6, 2, Finish::StopToken), upd(2, 1, 1, Finish::Stopped)});
  EXPECT_EQ(a->seqs[1].out, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(a->done());
  t = b.next_tick(0);
  ASSERT_EQ(t.add.size(), 1u);  // c
  EXPECT_EQ(t.add[0].id, 3u);
  EXPECT_EQ(t.add[0].stream, 0);
  EXPECT_FALSE(b.empty());
  b.publish({upd(3, 4, 1, Finish::Length)});
  EXPECT_TRUE(c->done());
  EXPECT_TRUE(b.empty());
  EXPECT_FALSE(b.next_tick(0).step);  // nothing runs: the replicas need not step
}

TEST(ServeBoard, SpreadsOverReplicasByFreeSlots) {
  Board b(2, 2);
  auto a = job_of(5);
  ASSERT_TRUE(b.submit(a));
  Tick t = b.next_tick(0);
  ASSERT_EQ(t.add.size(), 4u);  // 2 replicas x 2 slots; the fifth waits
  std::vector<int> replicas;
  for (const NewSequence& s : t.add) replicas.push_back(s.replica);
  EXPECT_EQ(replicas, (std::vector<int>{0, 1, 0, 1}));
  b.publish({upd(0, 1, 1), upd(2, 1, 1), upd(1, 1, 1, Finish::Length), upd(3, 1, 1)});
  t = b.next_tick(0);  // sequence 1 freed a slot of replica 1
  ASSERT_EQ(t.add.size(), 1u);
  EXPECT_EQ(t.add[0].replica, 1);
  EXPECT_EQ(t.add[0].stream, 4);
}

TEST(ServeBoard, ALostStepIsAnError) {
  Board b(1, 1);
  auto a = job_of(1);
  ASSERT_TRUE(b.submit(a));
  b.next_tick(0);
  EXPECT_THROW(b.publish({upd(0, 9, 2)}), std::exception);  // id 2 of a sequence that has none
}

TEST(ServeBoard, CancelDropsQueuedPromptsAndCancelsRunningOnes) {
  Board b(1, 1);
  auto a = job_of(3);
  ASSERT_TRUE(b.submit(a));
  Tick t = b.next_tick(0);
  ASSERT_EQ(t.add.size(), 1u);
  b.cancel(a);  // the client went away: sequence 0 is cancelled, prompts 1-2 never start
  t = b.next_tick(0);
  EXPECT_TRUE(t.add.empty());
  EXPECT_EQ(t.cancel, std::vector<uint64_t>{0});
  EXPECT_FALSE(t.step);
  b.publish({upd(0, 1, 1)});  // a step that ran before the cancel: ignored
  EXPECT_TRUE(a->seqs[0].out.empty());
  EXPECT_TRUE(b.empty());
  auto c = job_of(1);  // the slot is free again
  ASSERT_TRUE(b.submit(c));
  EXPECT_EQ(b.next_tick(0).add.size(), 1u);
}

TEST(ServeBoard, DrainRefusesNewRequests) {
  Board b(1, 1);
  auto a = job_of(1);
  ASSERT_TRUE(b.submit(a));
  b.drain();
  EXPECT_TRUE(b.draining());
  EXPECT_FALSE(b.submit(job_of(1)));
  // Accepted requests still run.
  Tick t = b.next_tick(0);
  EXPECT_EQ(t.add.size(), 1u);
}

TEST(ServeBoard, TickWireRoundTrip) {
  Tick t;
  NewSequence s;
  s.id = 12345678901ull;
  s.replica = 3;
  s.prompt = {1, 2, 3};
  s.max_tokens = 9;
  s.sample.temperature = 0.75f;
  s.sample.top_k = 40;
  s.sample.top_p = 0.9f;
  s.sample.seed = 0xFFFFFFFFFFFFFFF0ull;
  s.stream = 2;
  s.stop = {"a\nb", "\xC3\xA9"};
  t.add = {s};
  t.cancel = {4, 5};
  t.step = true;
  t.quit = true;
  const Tick u = Tick::from_wire(t.to_wire());
  ASSERT_EQ(u.add.size(), 1u);
  EXPECT_EQ(u.add[0].id, s.id);
  EXPECT_EQ(u.add[0].replica, 3);
  EXPECT_EQ(u.add[0].prompt, s.prompt);
  EXPECT_EQ(u.add[0].max_tokens, 9);
  EXPECT_EQ(u.add[0].sample.temperature, 0.75f);
  EXPECT_EQ(u.add[0].sample.top_k, 40);
  EXPECT_EQ(u.add[0].sample.top_p, 0.9f);
  EXPECT_EQ(u.add[0].sample.seed, s.sample.seed);
  EXPECT_EQ(u.add[0].stream, 2);
  EXPECT_EQ(u.add[0].stop, s.stop);
  EXPECT_EQ(u.cancel, t.cancel);
  EXPECT_TRUE(u.step);
  EXPECT_TRUE(u.quit);
}

// Byte-level ids: id b is byte b, 256 the end of document.
TEST(ServeRender, TextTokensOffsetsAndFinish) {
  auto tk = tok::make_tokenizer("bytes", "", "");
  SeqProgress p;
  p.out = {'a', 'b', 'E', 'N', 'D', 'c'};
  p.logprobs = {-1, -2, -3, -4, -5, -6};
  p.finish = Finish::Stopped;
  Rendered r = render(*tk, p, {"END"});
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.tokens, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.logprobs, (std::vector<float>{-1, -2}));
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1}));
  EXPECT_STREQ(r.finish, "stop");
  p.out = {'h', 'i', tk->eod()};
  p.logprobs = {-1, -2, -3};
  p.finish = Finish::StopToken;  // the end-of-document id is no text
  r = render(*tk, p, {});
  EXPECT_EQ(r.text, "hi");
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_STREQ(r.finish, "stop");
  p.finish = Finish::Running;
  p.out = {'h', 'i'};
  EXPECT_EQ(render(*tk, p, {}).finish, nullptr);
  p.finish = Finish::Length;
  EXPECT_STREQ(render(*tk, p, {}).finish, "length");
}

}  // namespace
}  // namespace loom::serve
