// tableToCsv / exportCsv: RFC 4180 quoting, header row, UTF-8 files and error messages.
#include "table_export.h"

#include <QFile>
#include <QStandardItemModel>
#include <QTemporaryDir>
#include <QtTest>

using namespace shardscope;

namespace {

void fill(QStandardItemModel& model) {
    model.setColumnCount(3);
    model.setHorizontalHeaderLabels(
        {QStringLiteral("layout"), QStringLiteral("memory, GB"), QStringLiteral("note")});
    model.appendRow({new QStandardItem(QStringLiteral("dp 8 · tp 8")),
                     new QStandardItem(QStringLiteral("61.2")),
                     new QStandardItem(QStringLiteral("fits"))});
    model.appendRow({new QStandardItem(QStringLiteral("say \"hi\"")),
                     new QStandardItem(QStringLiteral("1,5")),
                     new QStandardItem(QStringLiteral("two\nlines"))});
    model.appendRow({new QStandardItem(QString()), new QStandardItem(QStringLiteral("cr\rhere")),
                     new QStandardItem(QStringLiteral(" spaced "))});
}

const QString kExpected = QStringLiteral("layout,\"memory, GB\",note\r\n"
                                         "dp 8 · tp 8,61.2,fits\r\n"
                                         "\"say \"\"hi\"\"\",\"1,5\",\"two\nlines\"\r\n"
                                         ",\"cr\rhere\", spaced \r\n");

} // namespace

class TestTableExport : public QObject {
    Q_OBJECT

private slots:
    void quotesWhatNeedsQuoting() {
        QStandardItemModel model;
        fill(model);
        QCOMPARE(tableToCsv(model), kExpected);
    }

    void numbersUseDisplayText() {
        QStandardItemModel model(1, 2);
        model.setHorizontalHeaderLabels({QStringLiteral("n"), QStringLiteral("x")});
        model.setData(model.index(0, 0), 42);
        model.setData(model.index(0, 1), 0.5);
        QCOMPARE(tableToCsv(model), QStringLiteral("n,x\r\n42,0.5\r\n"));
    }

    void emptyModelHasOnlyTheHeader() {
        QStandardItemModel model(0, 2);
        model.setHorizontalHeaderLabels({QStringLiteral("a"), QStringLiteral("b")});
        QCOMPARE(tableToCsv(model), QStringLiteral("a,b\r\n"));
    }

    void exportWritesUtf8() {
        QStandardItemModel model;
        fill(model);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("layouts.csv"));
        QCOMPARE(exportCsv(model, path), QString());
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray bytes = f.readAll();
        QCOMPARE(bytes, kExpected.toUtf8());
        QVERIFY(bytes.contains("\xC2\xB7")); // the middle dot, UTF-8 encoded
    }

    void unwritablePathGivesAMessage() {
        QStandardItemModel model;
        fill(model);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("no/such/dir/layouts.csv"));
        const QString message = exportCsv(model, path);
        QVERIFY(!message.isEmpty());
        QVERIFY(message.contains(path));
        QVERIFY(!QFile::exists(path));
    }
};

QTEST_MAIN(TestTableExport)
#include "test_table_export.moc"
