// CalculatorPanel: verdict, controls and picture slots, and the escaped formula panel.
#include "calculator_panel.h"

#include <QLabel>
#include <QPlainTextEdit>
#include <QPointer>
#include <QScrollArea>
#include <QtTest>

using namespace shardscope;

class TestCalculatorPanel : public QObject {
    Q_OBJECT

private slots:
    void verdictTextAndLevel() {
        CalculatorPanel panel;
        panel.setVerdict(QStringLiteral("Fits: 61.2 GB of 80 GB per GPU"), VerdictLevel::Warning);
        QCOMPARE(panel.verdictText(), QStringLiteral("Fits: 61.2 GB of 80 GB per GPU"));
        QCOMPARE(panel.verdictLevel(), VerdictLevel::Warning);
        panel.setVerdict(QStringLiteral("Does not fit"), VerdictLevel::Bad);
        QCOMPARE(panel.verdictLevel(), VerdictLevel::Bad);
        QCOMPARE(panel.verdictText(), QStringLiteral("Does not fit"));
        // Levels look different.
        const QLabel* label = nullptr;
        for (const QLabel* l : panel.findChildren<QLabel*>())
            if (l->text() == QStringLiteral("Does not fit"))
                label = l;
        QVERIFY(label != nullptr);
        const QString bad = label->styleSheet();
        panel.setVerdict(QStringLiteral("Does not fit"), VerdictLevel::Good);
        QVERIFY(label->styleSheet() != bad);
    }

    void formulaHtmlHasEveryPartEscaped() {
        CalculatorPanel panel;
        Explanation e;
        e.label = "Activations";
        e.display = "12.0 GB";
        e.formula = "s * b * h * (34 + 5 a s / h) * L / t";
        e.substituted = "4096 * 1 * 8192 * (34 + 5 * 64 * 4096 / 8192) * 10 / 8 = 12.0 GB";
        e.source = "Korthikanti et al. 2022 <arXiv:2205.05198> & Megatron";
        Explanation w;
        w.label = "Weights < 80 GB";
        w.display = "16.1 GB";
        panel.setExplanations({e, w});
        const QString html = panel.formulaHtml();
        QVERIFY(html.contains(QStringLiteral("<b>Activations</b>")));
        QVERIFY(html.contains(QStringLiteral("12.0 GB")));
        QVERIFY(html.contains(QStringLiteral("s * b * h * (34 + 5 a s / h) * L / t")));
        QVERIFY(html.contains(QStringLiteral("= 4096 * 1 * 8192")));
        QVERIFY(html.contains(QStringLiteral("<tt>")));
        QVERIFY(html.contains(QStringLiteral("<i>Korthikanti et al. 2022 &lt;arXiv:2205.05198&gt; "
                                             "&amp; Megatron</i>")));
        QVERIFY(!html.contains(QStringLiteral("<arXiv")));
        QVERIFY(html.contains(QStringLiteral("<b>Weights &lt; 80 GB</b>")));
        // The browser shows the same thing.
        const QPlainTextEdit* browser = panel.findChild<QPlainTextEdit*>();
        QVERIFY(browser != nullptr);
        QVERIFY(browser->toPlainText().contains(QStringLiteral("<arXiv:2205.05198>")));

        panel.setExplanations({});
        QCOMPARE(panel.formulaHtml(), QString());
    }

    void formulaPanelFollowsEveryUpdate() {
        // The panel rewrites only the lines that changed; what it shows must still be exactly
        // the new explanations, whether the shape stays or changes.
        CalculatorPanel panel;
        const QPlainTextEdit* view = panel.findChild<QPlainTextEdit*>();
        QVERIFY(view != nullptr);
        auto make = [](const char* label, const char* display, const char* substituted) {
            Explanation e;
            e.label = label;
            e.display = display;
            e.formula = "a x b";
            e.substituted = substituted;
            e.source = "a paper";
            return e;
        };
        panel.setExplanations({make("Weights", "4.54 GB", "2 x 2.27"), make("MFU", "49.8 %", "x")});
        QVERIFY(view->toPlainText().contains("Weights = 4.54 GB"));
        panel.setExplanations({make("Weights", "9.08 GB", "2 x 4.54"), make("MFU", "49.8 %", "x")});
        const QString text = view->toPlainText();
        QVERIFY(text.contains("Weights = 9.08 GB"));
        QVERIFY(text.contains("= 2 x 4.54"));
        QVERIFY(!text.contains("4.54 GB"));
        QCOMPARE(text.count("a paper"), 2);
        panel.setExplanations({make("Only", "1", "1")}); // a different shape: rebuilt
        QVERIFY(view->toPlainText().startsWith("Only = 1"));
        QVERIFY(!view->toPlainText().contains("Weights"));
        QVERIFY(!view->document()->isUndoAvailable()); // in-place edits keep no history
    }

    void controlsAndPictureAreOwnedAndReplaced() {
        CalculatorPanel panel;
        QPointer<QWidget> controls = new QWidget;
        QPointer<QWidget> picture = new QWidget;
        panel.setControls(controls);
        panel.setPicture(picture);
        QVERIFY(panel.isAncestorOf(controls));
        QVERIFY(panel.isAncestorOf(picture));
        QCOMPARE(panel.findChild<QScrollArea*>()->widget(), controls.data());

        panel.setPicture(new QWidget);
        QTRY_VERIFY(picture.isNull());
        panel.setControls(new QWidget);
        QTRY_VERIFY(controls.isNull());
    }
};

QTEST_MAIN(TestCalculatorPanel)
#include "test_calculator_panel.moc"
