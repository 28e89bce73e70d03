// Reading a Slurm batch script (#SBATCH directives) as a Trainyard JobSpec.
//
// ParseSbatch follows sbatch: directives are read from "#SBATCH" lines at the top of
// the script, up to the first line that is neither blank nor a comment; later
// "#SBATCH" lines are ignored (with a warning, as they are a common mistake). A
// directive line is split into words like a shell would (quotes, backslash, an
// unquoted '#' starts a comment) and may hold several options, in any of the forms
// "--opt=value", "--opt value", "-o value" and "-ovalue". Long options must be
// written in full (sbatch also accepts unambiguous prefixes; we reject them with a
// "did you mean" hint, so a typo never silently changes meaning). When an option is
// repeated, the last one wins, as in sbatch.
//
// How sbatch options map onto the spec (one replica is one node):
//   --job-name/-J        name (default: the file name of `file`, as sbatch does)
//   --nodes/-N N|MIN-MAX replicas = MAX, min_replicas = MIN
//   --ntasks-per-node    procs_per_replica
//   --ntasks/-n          with --nodes: divided evenly over the nodes; with
//                        --ntasks-per-node alone: replicas = ntasks / per-node;
//                        alone: one replica running all the tasks
//   --gres=gpu[:TYPE]:N, --gpus-per-node=[TYPE:]N   resources.gpus and gpu_type
//   --cpus-per-task/-c   resources.milli_cpus (per task x tasks per node)
//   --mem                resources.memory_bytes (per node; plain numbers are MB)
//   --time/-t            time_limit (UNLIMITED, INFINITE and 0 mean none)
//   --partition/-p, --qos/-q, --account/-A   queue, priority, tenant
//   --signal=[R|B:]SIG[@SECS]  checkpoint.notice_signal and preempt_grace (Slurm
//                        sends it SECS before the time limit; Trainyard sends it
//                        SECS before preempting the job)
//   --requeue, --no-requeue, --output/-o, --error/-e, --chdir/-D
// Other sbatch options are warned about and ignored; words that are not sbatch
// options at all are errors.
//
// The whole script becomes spec.script ("#!/bin/bash\n" is prepended when it has no
// "#!" line); spec.command stays empty. The result is normalised and validated with
// NormalizeSpec / ValidateSpec; problems found there are reported against the
// directive that set the field, under the option name as written ("job.sh:3:
// --nodes: ...").
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <string_view>

#include "core/spec_codec.h"

namespace trainyard {

// `file` names the script in messages and, when no --job-name is given, supplies the
// job name (its last path component), as sbatch does. Returns the spec and any
// warnings, or every error found (each with file:line, the option, the bad value and
// what would be valid) and no spec.
SpecParseResult ParseSbatch(std::string_view text, std::string_view file);

}  // namespace trainyard
