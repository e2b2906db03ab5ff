// Runs the planner's layout search on a worker thread. The GUI thread only hands it inputs and
// receives progress and the result through queued signals; cancel() is safe from any thread.
#pragma once

#include "plan/search.h"

#include <QObject>
#include <QThread>
#include <atomic>
#include <memory>

namespace shardscope {

using SearchResultPtr = std::shared_ptr<const SearchResult>;

struct SearchRequest {
    PlanInputs inputs;
    SearchSpace space;
    int topK = 50;
};

class SearchWorker : public QObject {
    Q_OBJECT
public:
    explicit SearchWorker(QObject* parent = nullptr);
    ~SearchWorker() override; // cancels and joins the thread

    // Start a search; a running one is cancelled first. Returns the request's serial.
    int start(const SearchRequest& request);
    void cancel();
    bool isRunning() const { return running_; }

signals:
    void progress(int serial, double fraction);
    // `result->cancelled` tells a cancelled search from a finished one.
    void finished(int serial, shardscope::SearchResultPtr result);

private:
    QThread thread_;
    QObject* context_; // lives on thread_, runs the search
    std::shared_ptr<std::atomic<bool>> cancel_;
    int serial_ = 0;
    bool running_ = false;
};

} // namespace shardscope

Q_DECLARE_METATYPE(shardscope::SearchResultPtr)
