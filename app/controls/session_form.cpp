#include "session_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>

namespace shardscope {

SessionForm::SessionForm(SessionDocument* doc, QWidget* parent)
    : QWidget(parent), doc_(doc), form_(new QFormLayout(this)) {
    form_->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    connect(doc_, &SessionDocument::changed, this, &SessionForm::refresh);
}

void SessionForm::addSection(const QString& title) {
    auto* label = new QLabel("<b>" + title.toHtmlEscaped() + "</b>", this);
    label->setContentsMargins(0, 8, 0, 0);
    form_->addRow(label);
}

void SessionForm::addRow(const QString& label, QWidget* field, const QString& tip) {
    auto* l = new QLabel(label, this);
    l->setToolTip(tip);
    field->setToolTip(tip);
    l->setBuddy(field);
    form_->addRow(l, field);
}

QSpinBox* SessionForm::addInt(const QString& name, const QString& label, const QString& tip,
                              int min, int max, Get<int> get, Set<int> set, bool slider) {
    auto* spin = new QSpinBox(this);
    spin->setObjectName(name);
    spin->setRange(min, max);
    spin->setAccelerated(true);
    spin->setKeyboardTracking(false); // typing "128" is one edit, not three
    const QString what = label;
    connect(spin, &QSpinBox::valueChanged, this, [this, set, what](int v) {
        doc_->edit(QString("Set %1 to %2").arg(what).arg(v), [&](Session& s) { set(s, v); });
    });
    readers_.push_back([this, spin, get] {
        const QSignalBlocker b(spin);
        spin->setValue(get(doc_->session()));
    });
    QWidget* field = spin;
    if (slider) {
        auto* row = new QWidget(this);
        auto* h = new QHBoxLayout(row);
        h->setContentsMargins(0, 0, 0, 0);
        auto* bar = new QSlider(Qt::Horizontal, row);
        bar->setObjectName(name + "-slider");
        bar->setRange(min, std::min(max, 1024));
        bar->setToolTip(tip);
        h->addWidget(bar, 1);
        spin->setMinimumWidth(spin->sizeHint().width());
        h->addWidget(spin);
        connect(bar, &QSlider::sliderPressed, doc_, &SessionDocument::beginGesture);
        connect(bar, &QSlider::sliderReleased, doc_, &SessionDocument::endGesture);
        connect(bar, &QSlider::valueChanged, spin, &QSpinBox::setValue);
        readers_.push_back([bar, spin] {
            const QSignalBlocker b(bar);
            bar->setValue(spin->value());
        });
        field = row;
    }
    addRow(label, field, tip);
    return spin;
}

QDoubleSpinBox* SessionForm::addDouble(const QString& name, const QString& label,
                                       const QString& tip, double min, double max, int decimals,
                                       const QString& suffix, Get<double> get, Set<double> set) {
    auto* spin = new QDoubleSpinBox(this);
    spin->setObjectName(name);
    spin->setRange(min, max);
    spin->setDecimals(decimals);
    spin->setSuffix(suffix);
    spin->setKeyboardTracking(false);
    const QString what = label;
    connect(spin, &QDoubleSpinBox::valueChanged, this, [this, set, what](double v) {
        doc_->edit(QString("Set %1 to %2").arg(what).arg(v), [&](Session& s) { set(s, v); });
    });
    readers_.push_back([this, spin, get] {
        const QSignalBlocker b(spin);
        spin->setValue(get(doc_->session()));
    });
    addRow(label, spin, tip);
    return spin;
}

QCheckBox* SessionForm::addBool(const QString& name, const QString& label, const QString& tip,
                                Get<bool> get, Set<bool> set) {
    auto* box = new QCheckBox(this);
    box->setObjectName(name);
    const QString what = label;
    connect(box, &QCheckBox::toggled, this, [this, set, what](bool on) {
        doc_->edit(QString("%1 %2").arg(on ? "Turn on" : "Turn off", what),
                   [&](Session& s) { set(s, on); });
    });
    readers_.push_back([this, box, get] {
        const QSignalBlocker b(box);
        box->setChecked(get(doc_->session()));
    });
    addRow(label, box, tip);
    return box;
}

QComboBox* SessionForm::addChoice(const QString& name, const QString& label, const QString& tip,
                                  const std::vector<std::pair<QString, QString>>& items,
                                  Get<QString> get, Set<QString> set) {
    auto* combo = new QComboBox(this);
    combo->setObjectName(name);
    // Long item names ("Two-level all-reduce (in nodes, across, in nodes)") would widen the
    // whole control column; the list pops up as wide as its items anyway.
    combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    combo->setMinimumContentsLength(18);
    for (const auto& [text, key] : items)
        combo->addItem(text, key);
    const QString what = label;
    connect(combo, &QComboBox::activated, this, [this, combo, set, what](int index) {
        const QString key = combo->itemData(index).toString();
        doc_->edit(QString("Set %1 to %2").arg(what, combo->itemText(index)),
                   [&](Session& s) { set(s, key); });
    });
    readers_.push_back([this, combo, get] {
        const QSignalBlocker b(combo);
        combo->setCurrentIndex(combo->findData(get(doc_->session())));
    });
    addRow(label, combo, tip);
    return combo;
}

QLineEdit* SessionForm::addText(const QString& name, const QString& label, const QString& tip,
                                const QString& placeholder, Get<QString> get, Set<QString> set) {
    auto* line = new QLineEdit(this);
    line->setObjectName(name);
    line->setPlaceholderText(placeholder);
    const QString what = label;
    connect(line, &QLineEdit::editingFinished, this, [this, line, get, set, what] {
        const QString text = line->text();
        if (text != get(doc_->session()))
            doc_->edit(QString("Set %1").arg(what), [&](Session& s) { set(s, text); });
    });
    readers_.push_back([this, line, get] {
        const QSignalBlocker b(line);
        line->setText(get(doc_->session()));
    });
    addRow(label, line, tip);
    return line;
}

namespace {

// Calls `done` when the watched widget loses keyboard focus.
class FocusOut : public QObject {
public:
    FocusOut(QObject* parent, std::function<void()> done)
        : QObject(parent), done_(std::move(done)) {}
    bool eventFilter(QObject* watched, QEvent* event) override {
        if (event->type() == QEvent::FocusOut)
            done_();
        return QObject::eventFilter(watched, event);
    }

private:
    std::function<void()> done_;
};

} // namespace

QPlainTextEdit* SessionForm::addLines(const QString& name, const QString& label, const QString& tip,
                                      const QString& placeholder, Get<QString> get,
                                      Set<QString> set) {
    auto* edit = new QPlainTextEdit(this);
    edit->setObjectName(name);
    edit->setPlaceholderText(placeholder);
    edit->setTabChangesFocus(true);
    edit->setMaximumHeight(96);
    const QString what = label;
    edit->installEventFilter(new FocusOut(edit, [this, edit, get, set, what] {
        const QString text = edit->toPlainText();
        if (text != get(doc_->session()))
            doc_->edit(QString("Edit %1").arg(what), [&](Session& s) { set(s, text); });
    }));
    readers_.push_back([this, edit, get] {
        const QSignalBlocker b(edit);
        if (edit->toPlainText() != get(doc_->session()))
            edit->setPlainText(get(doc_->session()));
    });
    addRow(label, edit, tip);
    return edit;
}

void SessionForm::addWidget(const QString& label, QWidget* w) {
    if (label.isEmpty())
        form_->addRow(w);
    else
        addRow(label, w, w->toolTip());
}

void SessionForm::setEnabledWhen(QWidget* control, Get<bool> enabled) {
    readers_.push_back([this, control, enabled] { control->setEnabled(enabled(doc_->session())); });
}

void SessionForm::onRefresh(std::function<void(const Session&)> read) {
    readers_.push_back([this, read = std::move(read)] { read(doc_->session()); });
}

void SessionForm::refresh() {
    for (const auto& read : readers_)
        read();
}

QWidget* SessionForm::control(const QString& name) const {
    return findChild<QWidget*>(name);
}

} // namespace shardscope
