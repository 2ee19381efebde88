// Runs one rank's actions of a pipeline schedule (parallel/pipeline_schedule.h): forwards and
// backwards through callbacks, activations and their gradients moved between neighbouring ranks
// with point-to-point messages on the pipeline communicator.
//
// Sends are non-blocking, of a copy of the tensor (the stage may reuse its buffer at once), and are
// all waited for at the end - the buffered semantics the schedule simulator assumes, so a schedule
// that validates cannot deadlock here. Receives are posted ahead: the next `receives_ahead`
// receives of the rank's action list are started (non-blocking) as soon as earlier ones are taken,
// so a message travels while the rank computes the actions before the one that needs it; the
// receive action then only waits for it (0: each receive blocks when its action comes). Each
// message's tag names its micro-batch and sending chunk, so a receive posted early can still only
// match its own message, and a mismatched pair fails loudly instead of swapping micro-batches.
// Message buffers come from a pool of boundary-shaped tensors, returned when a send completes or a
// received tensor has been consumed, instead of a fresh allocation per message.
//
// The executor knows nothing of the model: what runs is in PipelineWork. It records the start and
// end of every action (seconds from a common start, after synchronizing the backend), for
// timelines and the measured bubble.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace tripod {

struct PipelineWork {
  // A fresh tensor of the shape and dtype of the boundary (the residual stream between chunks).
  std::function<Tensor()> boundary_buffer;
  // Forward of (micro-batch, chunk); `input` is the received activation, or nullptr on chunk 0
  // (read during the call only: its buffer is reused afterwards).
  std::function<void(int microbatch, int chunk, const Tensor* input)> forward;
  // Backward; `output_grad` is the received gradient, or nullptr on the last chunk (read during the
  // call only).
  std::function<void(int microbatch, int chunk, const Tensor* output_grad)> backward;
  // What to send after a forward (the chunk's output) and after a backward (d input); only read
  // until the next action.
  std::function<Tensor(int microbatch, int chunk)> output;
  std::function<Tensor(int microbatch, int chunk)> input_grad;
};

struct ActionTiming {
  PipelineAction action;
  double start = 0, end = 0;  // seconds since run_pipeline began (all ranks start after a barrier)
};

// Throws unless every message of the schedule gets a distinct tag below MPI's guaranteed 32768
// (m * chunks * 2 of them): checked by the trainer before any communication, and by run_pipeline.
void check_message_tags(const PipelineSchedule& schedule);
// check_message_tags, and every send directly follows the compute that produced its tensor (the
// executor sends the stage's buffer as it is then; stages reuse their buffers). run_pipeline checks.
void check_executable(const PipelineSchedule& schedule);

// Executes schedule.ranks[pp.rank()]. forward_only (evaluation): only forwards and activation
// messages. Returns the timing of every action, in order.
std::vector<ActionTiming> run_pipeline(const PipelineSchedule& schedule, Communicator& pp, Backend& backend,
                                       const PipelineWork& work, bool forward_only = false, int receives_ahead = 2);

// Every rank's timings on every rank (collective over pp).
std::vector<std::vector<ActionTiming>> gather_timings(Communicator& pp, const std::vector<ActionTiming>& mine);

// Measured bubble: 1 - (time in forwards and backwards, all ranks) / (ranks x the step's span).
double measured_bubble_fraction(const std::vector<std::vector<ActionTiming>>& ranks);

// A JSON timeline: {"schedule":..., "ranks":[[{"action":"F","microbatch":0,"chunk":0,"start":..,"end":..},...],...]}
nlohmann::json timeline_json(const PipelineSchedule& schedule, const std::vector<std::vector<ActionTiming>>& ranks);
// The same timeline from a simulation (validate_schedule's action times, in units of one stage's
// forward: "time_unit" says so).
nlohmann::json simulated_timeline_json(const PipelineSchedule& schedule, const ScheduleStats& stats);

}  // namespace tripod
