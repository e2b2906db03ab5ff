// SearchWorker: the search runs on its own thread, reports progress, and cancels.
#include "core/presets.h"
#include "search_worker.h"

#include <QtTest>
#include <atomic>
#include <utility>
#include <vector>

using namespace shardscope;

namespace {
SearchRequest request(const char* model, int nodes) {
    SearchRequest r;
    r.inputs.model = findModelPreset(model);
    r.inputs.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, nodes);
    r.inputs.parallel.globalBatch = 512;
    return r;
}
} // namespace

// What the worker delivered, received as the GUI receives it: queued to an object of this
// thread. (QSignalSpy connects directly, so it appended from the search's thread while the test
// read it: a data race ThreadSanitizer reported, in the test, not the worker.)
struct Delivered : QObject {
    explicit Delivered(SearchWorker& worker) {
        connect(&worker, &SearchWorker::finished, this, [this](int serial, SearchResultPtr r) {
            results.push_back({serial, r});
        });
        connect(&worker, &SearchWorker::progress, this, [this](int, double) { ++progress; });
    }
    std::vector<std::pair<int, SearchResultPtr>> results;
    int progress = 0;
};

class TestSearchWorker : public QObject {
    Q_OBJECT
private slots:
    void runsOffTheGuiThread() {
        SearchWorker worker;
        std::atomic<QThread*> seen{nullptr};
        // A direct connection runs in the emitting thread: the search's own.
        connect(
            &worker, &SearchWorker::progress, this,
            [&](int, double) { seen = QThread::currentThread(); }, Qt::DirectConnection);
        Delivered got(worker);
        const int serial = worker.start(request("llama3-8b", 4));
        QTRY_VERIFY_WITH_TIMEOUT(!got.results.empty(), 60000);
        QVERIFY(seen != nullptr);
        QVERIFY(seen != QThread::currentThread());
        QCOMPARE(got.results.front().first, serial);
        const SearchResultPtr& result = got.results.front().second;
        QVERIFY(result && !result->cancelled && !result->top.empty());
        QVERIFY(got.progress > 0);
        QVERIFY(!worker.isRunning());
    }

    void cancelStopsALongSearch() {
        SearchWorker worker;
        Delivered got(worker);
        worker.start(request("llama3-405b", 2048));
        worker.cancel();
        QTRY_VERIFY_WITH_TIMEOUT(!got.results.empty(), 60000);
        QVERIFY(got.results.front().second->cancelled);
    }

    void aNewSearchSupersedesTheRunningOne() {
        SearchWorker worker;
        Delivered got(worker);
        const int first = worker.start(request("llama3-405b", 2048));
        const int second = worker.start(request("llama3-8b", 1));
        QVERIFY(second > first);
        QTRY_COMPARE_WITH_TIMEOUT(got.results.size(), std::size_t(2), 60000);
        QVERIFY(got.results[0].second->cancelled);
        QCOMPARE(got.results[1].first, second);
        QVERIFY(!got.results[1].second->cancelled);
    }

    // Deleting cancels the search and joins its thread (a hang fails the test by its timeout): a
    // result that still arrives is the cancelled one, never a finished search of 2,048 GPUs.
    void destroyingWhileRunningCancelsAndJoins() {
        auto* worker = new SearchWorker;
        std::vector<SearchResultPtr> delivered;
        connect(worker, &SearchWorker::finished, this,
                [&](int, SearchResultPtr r) { delivered.push_back(r); });
        worker->start(request("llama3-405b", 2048));
        delete worker;
        QCoreApplication::processEvents();
        for (const SearchResultPtr& r : delivered)
            QVERIFY(r && r->cancelled);
    }
};

QTEST_MAIN(TestSearchWorker)
#include "test_search_worker.moc"
