"""The content of docs/images/step.svg, one training step on one rank (drawn by
scripts/draw_design.py): what each box says, the file it cites, and the calls of src/ whose
order the picture shows, which scripts/draw_design.py looks up before drawing."""

COMM = {  # who takes part, and the pill colour
    "TP": ("tensor-parallel group (pc.tp)", "#e07b00"),
    "PP": ("pipeline neighbours (pc.pp)", "#7b4fb3"),
    "DP": ("data-parallel group (pc.dp)", "#1f6fb2"),
    "embed": ("first and last stage (pc.embed)", "#2e8b57"),
    "world": ("every rank (pc.world)", "#555555"),
}

# (level, title, cited file, [(communication or None, line)]). Level 1: inside the schedule loop.
STEP = [
    (0, "Trainer::run_step(step): enqueued, the host does not wait for the device",
     "src/train/trainer_step.cpp", [
        (None, "this data-parallel rank's rows of the global batch, in micro-batches of "
               "parallel.micro_batch_size sequences, and lr: one upload (StepFeed)"),
        (None, "step_body: opt.zero_grad(), stage.reset_loss(), then the calls below; "
               "train.cuda_graph captures it once and replays it"),
        (None, "loss weight of the backward: dloss = loss_scale / (global_batch_size x seq_len)")]),
    (0, "DataLoader::train_batch", "src/data/loader.cpp", [
        (None, "inputs and targets (micro_batch, seq_len), a pure function of the global sample "
               "index: datasets blended by weight, shuffled per epoch"),
        (None, "called for every micro-batch of the step before it runs, through a BatchFn")]),
    (0, "PipelineExecutor::run: the stage's action list (make_1f1b, make_gpipe or make_interleaved)",
     "src/pipeline/executor.cpp", [
        (None, "1F1B on stage s of pp, m micro-batches: min(pp-s-1, m) warm-up forwards, then "
               "one forward and one backward in turn, then the rest"),
        (None, "at most min(pp-s, m) micro-batches in flight: the stage's activation slots "
               "(RunLayout::slots)"),
        (None, "parallel.overlap: the next action's receive is posted before the current action "
               "computes")]),
    (1, "forward action → GPTStage::forward(slot)", "src/model/gpt_stage.cpp", [
        ("PP", "stages > 0: receive the (N, C) input activation from stage s-1"),
        ("DP", "ZeRO 3: all-gather the embedding/head tensors and each layer's parameters right "
               "before use"),
        ("TP", "first stage: embedding of this rank's vocabulary rows + positions (tp rank 0), "
               "all-reduce"),
        ("TP", "block_forward: ln_1, qkv (column-parallel; llama: RoPE), attention, "
               "attn.c_proj (row-parallel), all-reduce, + bias + residual"),
        ("TP", "block_forward: ln_2, mlp.c_fc (column-parallel), GELU (llama: SwiGLU), "
               "mlp.c_proj (row-parallel), all-reduce, + bias + residual"),
        ("TP", "last stage: ln_f, logits of the vocabulary shard; all-reduce of the row max and "
               "exp-sums (never the logits); loss (summed on device)"),
        ("TP", "last stage: the head's backward at once (classifier_backward), all-reduce of its "
               "input gradient, ln_f backward"),
        ("PP", "stages < last: send the (N, C) output to stage s+1 (non-blocking)")]),
    (1, "backward action → GPTStage::backward(slot)", "src/model/gpt_stage.cpp", [
        ("PP", "stages < last: receive the (N, C) output gradient from stage s+1"),
        ("DP", "ZeRO 3: all-gather each layer's parameters again before its backward"),
        (None, "layers in reverse; train.recompute rebuilds what it dropped (selective: the "
               "attention probabilities; full: the layer)"),
        ("TP", "block_backward: MLP then attention, all-reduce of the input gradient of each "
               "column-parallel GEMM (2 per block)"),
        ("DP", "gradient hook layer_done: ZeRO 2/3 reduce the layer's gradients to their owners "
               "(every micro-batch)"),
        ("DP", "... ZeRO 0/1 with parallel.overlap start the layer's all-reduce (last "
               "micro-batch only)"),
        (None, "first stage: embedding backward into wte and wpe; hook backward_done"),
        ("PP", "stages > 0: send the (N, C) input gradient to stage s-1 (non-blocking)")]),
    (0, "ZeroOptimizer::reduce_grads_and_norm", "src/optim/zero.cpp", [
        ("embed", "tied embedding on pp > 1: all-reduce of wte's gradient between the first and "
                  "the last stage"),
        ("DP", "ZeRO 0/1: all-reduce of the flat gradient in buckets of 2^24 elements; ZeRO 2/3: "
               "the tied embedding to its owners"),
        ("DP", "... with parallel.ep > 1 the experts' tensors over the expert replicas"),
        ("world", "sum of squares of the elements this rank owns (every replica counted once) "
                  "into the step state's device double, all-reduced there")]),
    (0, "ZeroOptimizer::step(lr, loss scale, grad_clip)", "src/optim/zero_step.cpp", [
        (None, "decide_step on the device: a non-finite norm skips the update; AdamW factors for "
               "the count of applied updates"),
        (None, "gradient scale = min(1, grad_clip / (norm + 1e-6)) / loss_scale (grad_clip > 0)"),
        (None, "AdamW (Backend::adamw_update, factors read on the device) on the flat range this "
               "rank owns: all at ZeRO 0, its 1/dp shard at ZeRO 1-3"),
        ("DP", "ZeRO 1/2: all-gather of the updated shards (ZeRO 3 keeps its shard and "
               "gathers layer by layer in the next step)"),
        (None, "ZeRO 0-2: refresh the compute weights, the bf16/fp16 copy of the fp32 master "
               "weights (cuda low precision; nothing in fp32)")]),
    (0, "Trainer::step_stats: once per log interval (and before eval or a save)",
     "src/train/trainer_step.cpp", [
        ("world", "all-reduce of the last stage's device loss sums (tp rank 0): mean over the "
                  "global batch, before the update"),
        (None, "one read of the step state (norm, skipped steps) and timing marks: the only wait "
               "for the device"),
        (None, "(dynamic loss scaling also reads each step's overflow: it sets the next scale)")]),
]

# What the picture claims, as (file, the function's first line, calls in the order drawn).
STEP_ORDER = [
    ("src/train/trainer_step.cpp", "void Trainer::run_step(", [
        "samples_(first", "lr_at(", "feed_->load(", "step_body(dloss"]),
    ("src/train/trainer_step.cpp", "void Trainer::step_body(", [
        "opt_->zero_grad()", "stage_->reset_loss()", "exec_->run(feed_->tokens(), dloss)",
        "opt_->reduce_grads_and_norm()", "opt_->step(feed_->scalars())"]),
    ("src/train/trainer_step.cpp", "StepStats Trainer::step_stats(", [
        "pc_.world.all_reduce(stage_->loss_acc()", "loss_sum()", "opt_->read_state()"]),
    ("src/train/trainer.cpp", "void Trainer::build(", ["data_->train_batch("]),
    ("src/layout/schedule.cpp", "Schedule make_1f1b(", [
        "warmup = std::min(stages - stage - 1, m)", "PipeOp::Forward", "PipeOp::Backward"]),
    ("src/pipeline/executor.cpp", "void PipelineExecutor::run(", [
        "pc_.pp.wait(early_)", "stage_.forward(", "pc_.pp.isend(stage_.output(a.chunk, sl)",
        "stage_.backward(", "pc_.pp.isend(dinput"]),
    ("src/model/gpt_stage.cpp", "void GPTStage::forward(int chunk", [
        "gather(-1)", "embed_forward(", "pc_.tp.all_reduce(", "gather(first + l)",
        "block_forward(", "head(s, targets, dloss)"]),
    ("src/model/block.cpp", "void block_forward(", [
        "norm_forward(", "matmul_forward(", "rope_forward(", "attention_forward(",
        "row_parallel_residual(", "norm_forward(", "matmul_forward(", "swiglu_forward(",
        "gelu_forward(", "row_parallel_residual("]),
    ("src/model/block.cpp", "void row_parallel_residual(", [
        "matmul_forward(", "reduce_residual("]),
    ("src/model/block.cpp", "void reduce_residual(", [
        "tp.all_reduce(", "bias_residual("]),
    ("src/model/gpt_stage.cpp", "void GPTStage::head(", [
        "norm_forward(", "classifier_forward(", "ReduceOp::Max", "ReduceOp::Sum",
        "ce_loss(", "classifier_backward(", "pc_.tp.all_reduce(", "norm_backward("]),
    ("src/model/gpt_stage.cpp", "void GPTStage::backward(int chunk", [
        "gather(first + l)", "recompute(s, l, w0 + l)", "block_backward(", "hooks_.layer_done(",
        "embed_backward(", "hooks_.backward_done("]),
    ("src/model/block.cpp", "void block_backward(", ["column_input_grad(", "column_input_grad("]),
    ("src/model/block.cpp", "const void* column_input_grad(", ["tp.all_reduce("]),
    ("src/optim/zero.cpp", "void ZeroOptimizer::reduce_grads_and_norm(", [
        "pc_.embed.all_reduce(", "group(r.expert).all_reduce(", "reduce_to_owners(", "sum_squares(",
        "pc_.world.all_reduce("]),
    ("src/optim/zero_step.cpp", "void ZeroOptimizer::step(", [
        "decide_step(", "adamw_update(", "pc_.replicas().all_gather(", "refresh_compute_weights()"]),
]
