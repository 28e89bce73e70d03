#include "sim/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/replay.h"

namespace trainyard::sim {
namespace {

using std::chrono::minutes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The errors of a scenario that must not parse, as "file:line: field: message".
std::vector<std::string> Errors(const std::string& text) {
  ScenarioParseResult r = ParseScenario(text, "s.yaml");
  EXPECT_FALSE(r.ok());
  std::vector<std::string> out;
  for (const Diagnostic& d : r.errors) out.push_back(d.ToString());
  return out;
}

Scenario Parse(const std::string& text) {
  ScenarioParseResult r = ParseScenario(text, "s.yaml");
  for (const Diagnostic& d : r.errors) ADD_FAILURE() << d.ToString();
  return r.ok() ? *r.scenario : Scenario{};
}

const char* kMinimal = R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
steps:
  - at: 0s
    submit: [1]
)";

TEST(ScenarioParseTest, ReadsEveryField) {
  Scenario sc = Parse(R"(
policy: {ordering: fifo, placement: best-fit, preemption: none, backfill: false,
         reservations: 2, min_runtime: 10m, restart_cost: 30s, max_victims: 4}
nodes:
  - {name: a, count: 2, gpus: 8, gpu_type: h100, gpu_memory: 141Gi, cpus: 96, memory: 1Ti,
     spine: s-0, leaf: leaf-1, nvlink_group: 4, state: Cordoned}
  - {name: solo, gpus: 0, cpus: 500m}
queues:
  - {name: research, tenant: nlp, guaranteed: 8, limit: 16, weight: 2.5}
  - {name: sub, tenant: nlp, parent: research}
priority_classes:
  - {name: urgent, value: 800}
  - {name: normal, value: 150, preemptible: false}
jobs:
  - {id: 7, name: train, tenant: nlp, queue: research, priority: urgent, replicas: 4,
     min_replicas: 2, gpus: 8, gpu_type: H100, gpu_memory: 80Gi, cpus: 8, memory: 64Gi,
     topology: same-leaf, mode: soft, time_limit: 1h, duration: 30m,
     checkpoint_interval: 10m, preempt_grace: 1m, exclude: [a-0]}
steps:
  - at: 0s
    submit: 7
  - at: 10m
    checkpoint: [7]
    node_state: {a-1: NotReady, solo: Down}
  - at: 10m
    hold: []
  - at: 1h
    finish: [7]
)");
  EXPECT_EQ(sc.policy.ordering, "fifo");
  EXPECT_EQ(sc.policy.placement, "best-fit");
  EXPECT_EQ(sc.policy.preemption, "none");
  EXPECT_FALSE(sc.policy.backfill);
  EXPECT_EQ(sc.policy.reservations, 2);
  EXPECT_EQ(sc.policy.min_runtime, minutes(10));
  EXPECT_EQ(sc.policy.restart_cost, std::chrono::seconds(30));
  EXPECT_EQ(sc.policy.max_victims, 4);

  ASSERT_EQ(sc.nodes.size(), 3u);
  EXPECT_EQ(sc.nodes[0].name, "a-0");
  EXPECT_EQ(sc.nodes[1].name, "a-1");
  EXPECT_EQ(sc.nodes[2].name, "solo");
  const Node& a1 = sc.nodes[1];
  ASSERT_EQ(a1.gpus.size(), 8u);
  EXPECT_EQ(a1.gpus[5].index, 5);
  EXPECT_EQ(a1.gpus[5].model, "H100");
  EXPECT_EQ(a1.gpus[5].memory_bytes, 141 * kGiB);
  EXPECT_EQ(a1.gpus[3].nvlink_domain, "a-1-nvl0");
  EXPECT_EQ(a1.gpus[4].nvlink_domain, "a-1-nvl1");
  EXPECT_EQ(a1.milli_cpus, 96'000);
  EXPECT_EQ(a1.memory_bytes, kTiB);
  EXPECT_EQ(a1.topology.spine, "s-0");
  EXPECT_EQ(a1.topology.leaf, "leaf-1");
  EXPECT_EQ(a1.state, NodeState::kCordoned);
  EXPECT_TRUE(sc.nodes[2].gpus.empty());
  EXPECT_EQ(sc.nodes[2].milli_cpus, 500);
  EXPECT_TRUE(ValidateNode(a1).ok());

  ASSERT_EQ(sc.queues.size(), 2u);
  EXPECT_EQ(sc.queues[0].tenant, "nlp");
  EXPECT_EQ(sc.queues[0].guaranteed_gpus, 8);
  EXPECT_EQ(sc.queues[0].limit_gpus, 16);
  EXPECT_DOUBLE_EQ(sc.queues[0].weight, 2.5);
  EXPECT_EQ(sc.queues[1].parent, "research");
  EXPECT_EQ(sc.queues[1].limit_gpus, kMaxQueueGpus);  // no limit given
  EXPECT_TRUE(ValidateQueue(sc.queues[1]).ok());

  ASSERT_NE(sc.FindPriorityClass("urgent"), nullptr);
  EXPECT_EQ(sc.FindPriorityClass("urgent")->value, 800);
  EXPECT_EQ(sc.FindPriorityClass("normal")->value, 150);  // overrides the default
  EXPECT_FALSE(sc.FindPriorityClass("normal")->preemptible);
  EXPECT_EQ(sc.FindPriorityClass("p0")->value, 1000);  // defaults stay

  ASSERT_EQ(sc.jobs.size(), 1u);
  const ScenarioJob& j = sc.jobs[0];
  EXPECT_EQ(j.id, 7);
  EXPECT_EQ(j.name, "train");
  EXPECT_EQ(j.queue, "research");
  EXPECT_EQ(j.priority, "urgent");
  EXPECT_EQ(j.replicas, 4);
  EXPECT_EQ(j.min_replicas, 2);
  EXPECT_EQ(j.per_replica.gpus, 8);
  EXPECT_EQ(j.per_replica.gpu_type, "H100");
  EXPECT_EQ(j.per_replica.gpu_memory_bytes, 80 * kGiB);
  EXPECT_EQ(j.per_replica.milli_cpus, 8000);
  EXPECT_EQ(j.per_replica.memory_bytes, 64 * kGiB);
  EXPECT_EQ(j.topology.constraint, TopologyConstraint::kSameLeaf);
  EXPECT_FALSE(j.topology.hard);
  EXPECT_EQ(j.time_limit, minutes(60));
  EXPECT_EQ(j.duration, minutes(30));
  EXPECT_EQ(j.checkpoint_interval, minutes(10));
  EXPECT_EQ(j.preempt_grace, minutes(1));
  EXPECT_THAT(j.exclude, ElementsAre("a-0"));

  ASSERT_EQ(sc.steps.size(), 4u);
  EXPECT_THAT(sc.steps[0].submit, ElementsAre(7));
  EXPECT_EQ(sc.steps[1].at, minutes(10));
  EXPECT_THAT(sc.steps[1].checkpoint, ElementsAre(7));
  ASSERT_EQ(sc.steps[1].node_state.size(), 2u);
  EXPECT_EQ(sc.steps[1].node_state[0].first, "a-1");
  EXPECT_EQ(sc.steps[1].node_state[0].second, NodeState::kNotReady);
  EXPECT_EQ(sc.steps[1].node_state[1].second, NodeState::kDown);
  EXPECT_EQ(sc.steps[3].LineOf("finish"), sc.steps[3].line + 1);
}

TEST(ScenarioParseTest, FillsDefaults) {
  Scenario sc = Parse(kMinimal);
  EXPECT_EQ(sc.policy.ordering, "priority");
  EXPECT_TRUE(sc.policy.backfill);
  ASSERT_EQ(sc.nodes.size(), 1u);
  EXPECT_EQ(sc.nodes[0].name, "a");
  EXPECT_EQ(sc.nodes[0].state, NodeState::kReady);
  EXPECT_EQ(sc.nodes[0].gpus[0].nvlink_domain, "");
  EXPECT_EQ(sc.nodes[0].gpus[0].memory_bytes, 80 * kGiB);
  EXPECT_TRUE(sc.queues.empty());
  ASSERT_EQ(sc.jobs.size(), 1u);
  const ScenarioJob& j = sc.jobs[0];
  EXPECT_EQ(j.name, "job-1");
  EXPECT_EQ(j.tenant, "default");
  EXPECT_EQ(j.queue, "default");
  EXPECT_EQ(j.priority, "normal");
  EXPECT_EQ(j.replicas, 1);
  EXPECT_EQ(j.min_replicas, 1);
  EXPECT_EQ(j.topology.constraint, TopologyConstraint::kNone);
  EXPECT_FALSE(j.duration.has_value());
  EXPECT_EQ(j.time_limit.count(), 0);
}

TEST(ScenarioParseTest, UnknownFieldsNameTheFieldAndHint) {
  EXPECT_THAT(Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, replica: 2, gpus: 8}
steps:
  - {at: 0s, submit: [1]}
)"),
              ElementsAre("s.yaml:4: jobs[0].replica: unknown field; did you mean replicas?"));
  EXPECT_THAT(Errors(std::string(kMinimal) + "node: []\n"),
              ElementsAre("s.yaml:8: node: unknown field; did you mean nodes?"));
  EXPECT_THAT(Errors(std::string(kMinimal) + "zzz: 1\n"),
              ElementsAre("s.yaml:8: zzz: unknown field; valid fields are policy, nodes, queues, "
                          "priority_classes, jobs, steps"));
}

TEST(ScenarioParseTest, JobIdReferencedButNotDefined) {
  EXPECT_THAT(
      Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
steps:
  - at: 0s
    submit: [1, 7]
)"),
      ElementsAre("s.yaml:7: steps[0].submit[1]: job 7 is not defined; add it under jobs:"));
}

TEST(ScenarioParseTest, NegativeGpusAndOtherBadNumbers) {
  EXPECT_THAT(Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: -1}
  - {id: 2, replicas: 2, min_replicas: 3}
  - {id: 3, gpus: lots}
steps:
  - {at: 0s, submit: [1, 2, 3]}
)"),
              ElementsAre("s.yaml:4: jobs[0].gpus: must be >= 0, got -1",
                          "s.yaml:5: jobs[1].min_replicas: must be <= replicas (2), got 3",
                          "s.yaml:6: jobs[2].gpus: must be an integer, got \"lots\""));
}

TEST(ScenarioParseTest, BadDuration) {
  auto errors = Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8, time_limit: soon}
steps:
  - {at: 10x, submit: [1]}
)");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0], HasSubstr("s.yaml:4: jobs[0].time_limit: expected a duration such as"));
  EXPECT_THAT(errors[0], HasSubstr("got \"soon\""));
  EXPECT_THAT(errors[1], HasSubstr("s.yaml:6: steps[0].at: expected a duration"));
}

TEST(ScenarioParseTest, StepsMustNotGoBackInTime) {
  EXPECT_THAT(Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
steps:
  - at: 10m
    submit: [1]
  - at: 5m
)"),
              ElementsAre("s.yaml:8: steps[1].at: steps must not go back in time: 5m is before "
                          "the previous step's 10m"));
}

TEST(ScenarioParseTest, NamesMustExist) {
  EXPECT_THAT(
      Errors(R"(nodes:
  - {name: a, count: 2, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8, priority: hgih, exclude: [a-2]}
steps:
  - at: 0s
    submit: [1]
    node_state: {a-1: Redy, b: Down}
)"),
      ElementsAre("s.yaml:4: jobs[0].priority: must be one of p0, production, normal, "
                  "best-effort, got \"hgih\"",
                  "s.yaml:4: jobs[0].exclude[0]: no node is called \"a-2\"; did you mean a-0?",
                  "s.yaml:8: steps[0].node_state.a-1: must be one of Ready, Cordoned, Draining, "
                  "NotReady, Down, got \"Redy\"; did you mean Ready?",
                  "s.yaml:8: steps[0].node_state.b: no node is called \"b\"; nodes are a-0, a-1"));
}

TEST(ScenarioParseTest, EveryJobIsSubmittedExactlyOnce) {
  EXPECT_THAT(Errors(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
  - {id: 2, gpus: 8}
steps:
  - {at: 0s, submit: [1]}
  - {at: 1m, submit: [1]}
)"),
              ElementsAre("s.yaml:5: jobs: job 2 is never submitted; submit it in a step or "
                          "remove it",
                          "s.yaml:8: steps[1].submit: job 1 is already submitted by "
                          "steps[0].submit; a job is submitted once (preempted jobs requeue by "
                          "themselves)"));
}

TEST(ScenarioParseTest, PolicyAndNodeProblems) {
  auto errors = Errors(R"(policy: {ordering: prority, reservations: -1}
nodes:
  - {name: a, gpus: 8}
  - {name: b, gpus: 4, gpu_type: H100, nvlink_group: 8}
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8, mode: soft}
  - {id: 1, gpus: 8}
steps:
  - {submit: [1]}
)");
  EXPECT_THAT(errors,
              ElementsAre(HasSubstr("s.yaml:1: policy.ordering: unknown policy \"prority\"; "
                                    "valid: priority, fifo, las, short-first (did you mean priority?)"),
                          "s.yaml:1: policy.reservations: must be >= 0, got -1",
                          "s.yaml:3: nodes[0].gpu_type: required when gpus > 0 (e.g. H100)",
                          "s.yaml:4: nodes[1].nvlink_group: must be <= gpus (4), got 8",
                          "s.yaml:5: nodes[2].name: node a is already defined by nodes[0]",
                          "s.yaml:7: jobs[0].mode: applies only with a topology constraint; add "
                          "topology:",
                          "s.yaml:8: jobs[1].id: job 1 is already defined at line 7",
                          "s.yaml:10: steps[0].at: required: when the step happens, e.g. at: 10m"));
}

TEST(ScenarioParseTest, BadNodeNameIsReportedOnce) {
  EXPECT_THAT(Errors(R"(nodes:
  - {name: "a b", count: 2, gpus: 1, gpu_type: H100}
  - {gpus: 1, gpu_type: H100}
jobs: []
steps: [{at: 0s}]
)"),
              ElementsAre("s.yaml:2: nodes[0].name: may hold only letters, digits, '-', '_' and "
                          "'.', got \"a b\"",
                          "s.yaml:3: nodes[1].name: required: give the node (or group) a name"));
}

TEST(ScenarioParseTest, NotAScenario) {
  EXPECT_THAT(Errors(""), ElementsAre("s.yaml: scenario is empty; it needs nodes, jobs and steps"));
  EXPECT_THAT(Errors("- 1\n- 2\n"),
              ElementsAre("s.yaml:1: a scenario must be a map with nodes, jobs and steps, got a "
                          "list"));
  EXPECT_THAT(Errors("nodes: [\n"), ElementsAre(HasSubstr("not valid YAML")));
  EXPECT_THAT(Errors("policy: {}\n"),
              ElementsAre("s.yaml:1: nodes: required: a scenario needs at least one node group",
                          "s.yaml:1: jobs: required: list the jobs the steps submit",
                          "s.yaml:1: steps: required: a scenario needs at least one step"));
}

// --- replay ----------------------------------------------------------------------

ReplayResult ReplayText(const std::string& text) {
  Scenario sc = Parse(text);
  return Replay(sc);
}

const StepOutcome& StepAt(const ReplayResult& r, size_t i) {
  static const StepOutcome kEmpty;
  return i < r.steps.size() ? r.steps[i] : kEmpty;
}

TEST(ReplayTest, GangsStartWholeOneAfterAnother) {
  ReplayResult r = ReplayText(R"(nodes:
  - {name: n, count: 4, gpus: 1, gpu_type: H100}
jobs:
  - {id: 1, replicas: 4, gpus: 1, duration: 1h}
  - {id: 2, replicas: 4, gpus: 1, duration: 1h}
  - {id: 3, replicas: 4, gpus: 1, duration: 1h}
steps:
  - {at: 0s, submit: [1, 2, 3]}
  - {at: 1h}
  - {at: 2h}
)");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const sched::Decisions& d = StepAt(r, i).decisions;
    ASSERT_EQ(d.binds.size(), 1u) << "step " << i;
    EXPECT_EQ(d.binds[0].job, static_cast<JobId>(i + 1));
    EXPECT_EQ(d.binds[0].replicas.size(), 4u);
    EXPECT_EQ(d.waiting.size(), 2 - i);
    EXPECT_TRUE(StepAt(r, i).violations.empty());
  }
  ASSERT_EQ(StepAt(r, 1).events.size(), 1u);
  EXPECT_EQ(StepAt(r, 1).events[0].kind, ReplayEvent::Kind::kSucceeded);
  EXPECT_EQ(StepAt(r, 1).events[0].at, minutes(60));
  ASSERT_EQ(r.jobs.size(), 3u);
  EXPECT_EQ(r.jobs[0].state, ReplayState::kSucceeded);
  EXPECT_EQ(r.jobs[2].state, ReplayState::kRunning);
  EXPECT_EQ(r.jobs[2].first_start, minutes(120));
}

TEST(ReplayTest, PreemptedJobLeavesNextStepAndResumesFromItsCheckpoint) {
  ReplayResult r = ReplayText(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8, duration: 1h, checkpoint_interval: 15m}
  - {id: 2, priority: production, gpus: 8, duration: 10m}
steps:
  - {at: 0s, submit: [1]}
  - {at: 40m, submit: [2]}
  - {at: 41m}
  - {at: 51m}
  - {at: 1h21m}
)");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.steps.size(), 5u);
  // 40m: automatic checkpoint at 30m; preempted with 10m x 8 GPUs lost.
  const StepOutcome& s2 = StepAt(r, 1);
  ASSERT_FALSE(s2.events.empty());
  EXPECT_EQ(s2.events[0].kind, ReplayEvent::Kind::kCheckpoint);
  EXPECT_EQ(s2.events[0].at, minutes(30));
  ASSERT_EQ(s2.decisions.preemptions.size(), 1u);
  EXPECT_EQ(s2.decisions.preemptions[0].job, 1);
  EXPECT_EQ(s2.decisions.preemptions[0].lost_gpu_time, minutes(80));
  // 41m: job 1 requeued, job 2 starts.
  const StepOutcome& s3 = StepAt(r, 2);
  ASSERT_FALSE(s3.events.empty());
  EXPECT_EQ(s3.events[0].kind, ReplayEvent::Kind::kRequeued);
  ASSERT_EQ(s3.decisions.binds.size(), 1u);
  EXPECT_EQ(s3.decisions.binds[0].job, 2);
  // 51m: job 2 done, job 1 restarts with 30m of its 1h left: done at 1h21m.
  ASSERT_EQ(StepAt(r, 3).decisions.binds.size(), 1u);
  EXPECT_EQ(StepAt(r, 3).decisions.binds[0].job, 1);
  const JobOutcome& j1 = r.jobs[0];
  EXPECT_EQ(j1.state, ReplayState::kSucceeded);
  EXPECT_EQ(j1.end, minutes(81));
  EXPECT_EQ(j1.starts, 2);
  EXPECT_EQ(j1.preemptions, 1);
  EXPECT_EQ(j1.lost_gpu_time, minutes(80));
  EXPECT_EQ(r.Violations(), 0u);
}

TEST(ReplayTest, EventThatCannotApplyIsAnErrorWithItsLine) {
  Scenario sc = Parse(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
  - {id: 2, gpus: 8}
steps:
  - at: 0s
    submit: [1, 2]
  - at: 1m
    finish: [2]
)");
  ReplayResult r = Replay(sc);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].ToString(),
            "s.yaml:10: steps[1].finish: job 2 is Pending at 1m, not running; only a running "
            "job can finish");
  EXPECT_EQ(r.steps.size(), 1u);  // the replay stops at the bad step
}

TEST(ReplayTest, HeldJobsWaitAndNodesDownRequeue) {
  ReplayResult r = ReplayText(R"(nodes:
  - {name: a, count: 2, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1, gpus: 8}
  - {id: 2, gpus: 8}
steps:
  - {at: 0s, submit: [1, 2], hold: [2]}
  - {at: 10m, node_state: {a-0: Down}, release: [2]}
)");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(StepAt(r, 0).decisions.waiting.size(), 1u);
  EXPECT_THAT(StepAt(r, 0).decisions.waiting[0].reason.str(), HasSubstr("held"));
  ASSERT_EQ(StepAt(r, 0).decisions.binds.size(), 1u);
  EXPECT_EQ(StepAt(r, 0).decisions.binds[0].replicas[0].node, "a-0");
  // a-0 goes Down: job 1 is requeued with 10m x 8 GPUs lost; only a-1 is left.
  const sched::Decisions& d = StepAt(r, 1).decisions;
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, 1);  // submitted first
  EXPECT_EQ(d.binds[0].replicas[0].node, "a-1");
  EXPECT_EQ(r.jobs[0].lost_gpu_time, minutes(80));
  EXPECT_EQ(r.Violations(), 0u);
}

TEST(ReplayTest, IsDeterministic) {
  const std::string text = R"(nodes:
  - {name: a, count: 3, gpus: 8, gpu_type: H100, leaf: l1}
  - {name: b, count: 3, gpus: 8, gpu_type: H100, leaf: l2}
jobs:
  - {id: 1, replicas: 2, gpus: 8, time_limit: 1h, duration: 50m}
  - {id: 2, replicas: 3, gpus: 4, topology: same-leaf}
  - {id: 3, replicas: 4, gpus: 8, time_limit: 2h}
  - {id: 4, gpus: 2, time_limit: 20m, duration: 20m}
  - {id: 5, priority: production, replicas: 2, gpus: 8}
steps:
  - {at: 0s, submit: [1, 2]}
  - {at: 10m, submit: [3, 4]}
  - {at: 30m, submit: [5]}
  - {at: 1h}
)";
  ReplayResult a = ReplayText(text), b = ReplayText(text);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].decisions, b.steps[i].decisions) << "step " << i;
  }
}

}  // namespace
}  // namespace trainyard::sim
