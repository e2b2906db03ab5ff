#include "search_worker.h"

#include <QMetaObject>

namespace shardscope {

SearchWorker::SearchWorker(QObject* parent) : QObject(parent), context_(new QObject) {
    qRegisterMetaType<SearchResultPtr>("shardscope::SearchResultPtr");
    context_->moveToThread(&thread_);
    connect(&thread_, &QThread::finished, context_, &QObject::deleteLater);
    thread_.setObjectName("search");
    thread_.start();
    connect(this, &SearchWorker::finished, this, [this](int serial, const SearchResultPtr&) {
        if (serial == serial_)
            running_ = false;
    });
}

SearchWorker::~SearchWorker() {
    cancel();
    thread_.quit();
    thread_.wait();
}

int SearchWorker::start(const SearchRequest& request) {
    cancel();
    const int serial = ++serial_;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = flag;
    running_ = true;
    // The lambda runs on the worker thread; signals emitted there reach the GUI queued.
    QMetaObject::invokeMethod(context_, [this, request, flag, serial] {
        SearchOptions options;
        options.topK = request.topK;
        options.keepAll = true;
        options.cancel = flag.get();
        double last = -1;
        options.progress = [&](double f) {
            if (f - last >= 0.01) { // at most a hundred updates
                last = f;
                emit progress(serial, f);
            }
        };
        const PlanInputs& in = request.inputs;
        auto result = std::make_shared<SearchResult>(searchLayouts(
            in.model, in.cluster, in.parallel, in.train, in.assume, request.space, options));
        emit finished(serial, result);
    });
    return serial;
}

void SearchWorker::cancel() {
    if (cancel_)
        cancel_->store(true);
    running_ = false;
}

} // namespace shardscope
