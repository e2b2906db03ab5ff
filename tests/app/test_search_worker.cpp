// SearchWorker: the search runs on its own thread, reports progress, and cancels.
#include "core/presets.h"
#include "search_worker.h"

#include <QSignalSpy>
#include <QtTest>
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

class TestSearchWorker : public QObject {
    Q_OBJECT
private slots:
    void runsOffTheGuiThread() {
        SearchWorker worker;
        QThread* seen = nullptr;
        // A direct connection runs in the emitting thread: the search's own.
        connect(
            &worker, &SearchWorker::progress, this,
            [&](int, double) { seen = QThread::currentThread(); }, Qt::DirectConnection);
        QSignalSpy done(&worker, &SearchWorker::finished);
        QSignalSpy progress(&worker, &SearchWorker::progress);
        const int serial = worker.start(request("llama3-8b", 4));
        QVERIFY(done.wait(60000));
        QVERIFY(seen != nullptr);
        QVERIFY(seen != QThread::currentThread());
        QCOMPARE(done.first().at(0).toInt(), serial);
        const auto result = done.first().at(1).value<SearchResultPtr>();
        QVERIFY(result && !result->cancelled && !result->top.empty());
        QVERIFY(progress.count() > 0);
        QVERIFY(!worker.isRunning());
    }

    void cancelStopsALongSearch() {
        SearchWorker worker;
        QSignalSpy done(&worker, &SearchWorker::finished);
        worker.start(request("llama3-405b", 2048));
        worker.cancel();
        QVERIFY(done.wait(60000));
        QVERIFY(done.first().at(1).value<SearchResultPtr>()->cancelled);
    }

    void aNewSearchSupersedesTheRunningOne() {
        SearchWorker worker;
        QSignalSpy done(&worker, &SearchWorker::finished);
        const int first = worker.start(request("llama3-405b", 2048));
        const int second = worker.start(request("llama3-8b", 1));
        QVERIFY(second > first);
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 2, 60000);
        QVERIFY(done.at(0).at(1).value<SearchResultPtr>()->cancelled);
        QCOMPARE(done.at(1).at(0).toInt(), second);
        QVERIFY(!done.at(1).at(1).value<SearchResultPtr>()->cancelled);
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
