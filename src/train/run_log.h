// Where the training loop's records go: the --metrics-file JSON lines and the --tensorboard
// event file (train/tensorboard.h). Rank 0 alone has one; on other ranks both are off.
//
// Every row is stamped with "wall_time" (unix seconds) and "elapsed_s" (seconds since this
// process's `train` began, setup included; a resumed run starts again from 0), and TensorBoard
// gets the same wall time, so a metrics row and its TensorBoard points match exactly.
#pragma once
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace ft {

class TensorBoardWriter;

class RunLog {
 public:
  enum class Row {
    step,  // a logged step: train/* and memory/* scalars
    eval,  // an evaluation: val/loss and val/<metric> (every "val_" field)
    other  // the metrics file only (a bad step's report)
  };

  // Empty paths: that output is off. `started`: when training started, for elapsed_s (a
  // re-planned run keeps counting from the first start).
  RunLog(const std::string& metrics_file, const std::string& tensorboard_dir,
         std::chrono::steady_clock::time_point started);
  ~RunLog();

  // Stamps `row`, appends it to the metrics file and writes its scalars to TensorBoard; both
  // are flushed, so a crash loses at most this row.
  void write(nlohmann::json row, Row kind);

 private:
  std::ofstream metrics_;
  std::string metrics_path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace ft
