// The generation loop every rank of loom serve runs: rank 0 decides each tick (which queued
// prompts enter which replica's free cache slots, which sequences are cancelled, when to quit)
// and broadcasts it; every rank applies it, each replica runs one decode step of its active
// sequences together, and the replicas' new ids are gathered to rank 0.
#pragma once
#include <functional>
#include <string>

#include "data_tools/tokenizer.h"
#include "serve/board.h"
#include "train/generate.h"

namespace loom::serve {

struct LoopStats {
  int64_t ticks = 0, steps = 0, sequences = 0, cancelled = 0;
};

// board: rank 0's (nullptr elsewhere). stop_token: the end-of-document id, which finishes a
// sequence. stop_requested: polled by rank 0; once true the board drains, and the loop quits
// when every accepted request is answered. Collective over world.
LoopStats run_serve_loop(Generator& gen, ParallelCtx& pc, Board* board, int32_t stop_token,
                         const std::function<bool()>& stop_requested);

// What a decode step gave this replica's sequences (still running, and just finished), and the
// same gathered from every replica to world rank 0 (elsewhere: empty). Collective over the
// first rank (pp 0, tp 0) of every replica.
std::vector<SeqUpdate> step_updates(const std::vector<GenSequence>& active,
                                    const std::vector<GenSequence>& finished);
std::vector<SeqUpdate> gather_updates(const std::vector<SeqUpdate>& mine, ParallelCtx& pc);

// The stop test of a sequence: its text (EOD dropped) holds one of its stop strings.
bool hits_stop(const tok::Tokenizer& tk, const GenSequence& s,
               const std::vector<std::string>& stops);

}  // namespace loom::serve
