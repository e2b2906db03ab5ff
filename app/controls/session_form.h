// A form of controls bound to the session: each control reads its value from the session when the
// session changes, and writes through SessionDocument::edit (one undo step per change; a slider
// drag is one gesture, so it merges into one step). Pages declare their controls in a few lines.
#pragma once

#include "session_document.h"

#include <QWidget>
#include <functional>
#include <vector>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPlainTextEdit;
class QFormLayout;
class QSlider;
class QSpinBox;

namespace shardscope {

class SessionForm : public QWidget {
    Q_OBJECT
public:
    SessionForm(SessionDocument* doc, QWidget* parent = nullptr);

    template <typename T> using Get = std::function<T(const Session&)>;
    template <typename T> using Set = std::function<void(Session&, T)>;

    void addSection(const QString& title);
    // A spin box; with `slider` a slider beside it over [min, min(max, 1024)] (drags merge into
    // one undo step; the spin box reaches the full range).
    QSpinBox* addInt(const QString& name, const QString& label, const QString& tip, int min,
                     int max, Get<int> get, Set<int> set, bool slider = false);
    QDoubleSpinBox* addDouble(const QString& name, const QString& label, const QString& tip,
                              double min, double max, int decimals, const QString& suffix,
                              Get<double> get, Set<double> set);
    QCheckBox* addBool(const QString& name, const QString& label, const QString& tip, Get<bool> get,
                       Set<bool> set);
    // A combo of (shown text, stored key) pairs.
    QComboBox* addChoice(const QString& name, const QString& label, const QString& tip,
                         const std::vector<std::pair<QString, QString>>& items, Get<QString> get,
                         Set<QString> set);
    // A line of text, written to the session when editing finishes (Enter or leaving the field).
    QLineEdit* addText(const QString& name, const QString& label, const QString& tip,
                       const QString& placeholder, Get<QString> get, Set<QString> set);
    // Several lines (a host list), written to the session when the field loses focus.
    QPlainTextEdit* addLines(const QString& name, const QString& label, const QString& tip,
                             const QString& placeholder, Get<QString> get, Set<QString> set);
    // Any widget in a row of its own (buttons, pickers); it keeps itself up to date.
    void addWidget(const QString& label, QWidget* w);
    // Enable or disable a row's control from the session (e.g. vpp only when interleaved).
    void setEnabledWhen(QWidget* control, Get<bool> enabled);
    // Anything else a control shows from the session (an item's text), on every refresh.
    void onRefresh(std::function<void(const Session&)> read);

    // Re-read every control from the session without emitting edits.
    void refresh();

    // The control whose objectName is `name` (for tests and for pages).
    QWidget* control(const QString& name) const;

private:
    void addRow(const QString& label, QWidget* field, const QString& tip);

    SessionDocument* doc_;
    QFormLayout* form_;
    std::vector<std::function<void()>> readers_;
};

} // namespace shardscope
