// MpiEnv implementation. Thread level: we ask for MPI_THREAD_MULTIPLE. Every MPI call is made by
// the main thread, except MPI_Abort from the watchdog thread, which the standard allows only under
// MULTIPLE; with a lower level (FUNNELED is enough for everything else) the watchdog ends its
// process with _exit(3) instead, and mpirun tears the job down because a rank exited without
// MPI_Finalize (under srun that needs --kill-on-bad-exit=1).
#include "parallel/mpi_env.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "parallel/mpi_check.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

namespace {

MpiEnv* g_current = nullptr;

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return end && *end == '\0' ? x : fallback;
}

}  // namespace

void mpi_fail(int code, const char* statement, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "MPI error %d", code);
  // main() prefixes every error of a distributed run with the rank and host.
  throw PeerError(fmt::format("MPI call `{}` failed at {}:{}: {}; a peer rank failed or the job is being torn down",
                              statement, file, line, text));
}

bool MpiEnv::launched_by_mpi() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK") ||
      std::getenv("PMI_SIZE"))
    return true;
  // Slurm sets SLURM_PROCID for every task, also for a single `srun cnnscale ...` (no MPI needed).
  return std::getenv("SLURM_PROCID") && env_long("SLURM_NTASKS", 1) > 1;
}

MpiEnv::MpiEnv(int* argc, char*** argv) : host_(hostname()) {
  CNNSCALE_CHECK(g_current == nullptr, "a second MpiEnv in one process");
  g_current = this;
  if (!launched_by_mpi()) return;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw_runtime("MPI_Init_thread failed on host {}", host_);
  initialized_ = true;
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Errors come back as codes (MPI_CHECK turns them into PeerError naming the call) instead of
  // MPI's default of aborting with a message that names nothing of ours.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_CHECK(MPI_Comm_free(&node));
  const long slurm_tasks = env_long("SLURM_NTASKS", 1);
  if (std::getenv("SLURM_PROCID") && slurm_tasks > 1 && size_ == 1 && !std::getenv("OMPI_COMM_WORLD_SIZE"))
    throw_config(
        "Slurm started {} tasks but MPI sees a world of 1 rank: launch with `srun --mpi=pmix` (or "
        "pmi2) or mpirun so the ranks form one job",
        slurm_tasks);
}

MpiEnv::~MpiEnv() {
  if (initialized_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  g_current = nullptr;
}

MpiEnv* MpiEnv::current() {
  return g_current;
}

std::string MpiEnv::library_version() const {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string v(text, static_cast<size_t>(len));
  // Open MPI's string continues over several lines (repository, release date): keep the first.
  if (auto nl = v.find_first_of("\r\n"); nl != std::string::npos) v.resize(nl);
  while (!v.empty() && (v.back() == ',' || v.back() == ' ' || v.back() == '\0')) v.pop_back();
  return v;
}

std::vector<std::string> MpiEnv::allgather(const std::string& value) const {
  if (!initialized_) return {value};
  BlockingOp op("MPI_Allgatherv");
  note_collective_arrival();  // what the peers' watchdogs compare (progress_board.hpp)
  CNNSCALE_CHECK(value.size() < static_cast<size_t>(INT_MAX / size_), "allgather of {} bytes", value.size());
  int len = static_cast<int>(value.size());
  std::vector<int> lens(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_CHECK(
      MPI_Allgatherv(value.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
}

std::vector<double> MpiEnv::allgather(double value) const {
  if (!initialized_) return {value};
  BlockingOp op("MPI_Allgather");
  note_collective_arrival();
  std::vector<double> out(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Allgather(&value, 1, MPI_DOUBLE, out.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD));
  return out;
}

void MpiEnv::broadcast(std::vector<char>& bytes, int root) const {
  if (!initialized_) return;
  BlockingOp op("MPI_Bcast");
  note_collective_arrival();
  int len = static_cast<int>(bytes.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD));
  bytes.resize(static_cast<size_t>(len));
  MPI_CHECK(MPI_Bcast(bytes.data(), len, MPI_CHAR, root, MPI_COMM_WORLD));
}

void MpiEnv::abort_job(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace cnnscale
