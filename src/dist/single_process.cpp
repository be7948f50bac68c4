// The single-process communicator: world size 1, so a sum, a minimum or a gather over ranks
// is the value itself. Outputs that are a different buffer than the input are copied on the
// device through the backend.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace ft {

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(Backend& be) : be_(be) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string describe() const override { return "single process"; }
  void all_reduce_sum(Tensor, StreamHandle) override {}
  void all_reduce_group(std::span<const Tensor>, StreamHandle, CommLane) override {}
  void reduce_scatter_group(std::span<const Tensor>, StreamHandle, CommLane) override {}  // one piece: the chunk
  void all_gather_group(std::span<const Tensor>, StreamHandle) override {}
  void all_reduce_sum(std::span<double>) override {}
  int64_t all_reduce_min(int64_t v) override { return v; }
  void all_gather(Tensor shard, Tensor out, StreamHandle) override { copy(shard, out, "all_gather"); }
  void broadcast(Tensor, int root) override { FT_CHECK(root == 0, "broadcast from rank ", root, " of 1"); }
  void barrier() override {}

 private:
  void copy(Tensor in, Tensor out, const char* op) {
    FT_CHECK(in.bytes() == out.bytes() && in.dtype == out.dtype, op, ": ", in.shape_str(), " vs ", out.shape_str());
    if (in.data == out.data) return;
    // Device to device through the host keeps the Backend interface small; a single rank
    // only gets here when a caller asks for a copy it could have skipped.
    std::vector<char> staging(in.bytes());
    be_.copy_to_host(staging.data(), in.data, in.bytes());
    be_.copy_to_device(out.data, staging.data(), in.bytes());
  }
  Backend& be_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator(Backend& backend) {
  return std::make_unique<SingleProcessCommunicator>(backend);
}

}  // namespace ft
