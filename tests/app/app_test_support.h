// Driving bound controls the way a user does, and reading the figures pages show.
#pragma once

#include "controls/session_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QtTest>

namespace shardscope::test {

inline void setInt(SessionForm* form, const char* name, int value) {
    auto* spin = qobject_cast<QSpinBox*>(form->control(name));
    QVERIFY2(spin, name);
    spin->setValue(value);
}

inline void setDouble(SessionForm* form, const char* name, double value) {
    auto* spin = qobject_cast<QDoubleSpinBox*>(form->control(name));
    QVERIFY2(spin, name);
    spin->setValue(value);
}

inline void setBool(SessionForm* form, const char* name, bool on) {
    auto* box = qobject_cast<QCheckBox*>(form->control(name));
    QVERIFY2(box, name);
    box->setChecked(on);
}

// Pick the item whose data is `key`, as a click on it would.
inline void choose(SessionForm* form, const char* name, const QString& key) {
    auto* combo = qobject_cast<QComboBox*>(form->control(name));
    QVERIFY2(combo, name);
    const int i = combo->findData(key);
    QVERIFY2(i >= 0, qPrintable(QString("%1 has no item %2").arg(name, key)));
    combo->setCurrentIndex(i);
    emit combo->activated(i);
}

// The sort value (UserRole) of column `column` in the row whose first cell reads `label`.
inline double figure(const QStandardItemModel* model, const QString& label, int column = 1) {
    for (int r = 0; r < model->rowCount(); ++r) {
        if (model->item(r, 0)->text() == label)
            return model->item(r, column)->data(Qt::UserRole).toDouble();
    }
    qWarning("no row %s", qPrintable(label));
    return -1;
}

inline QString tooltip(const QStandardItemModel* model, const QString& label, int column = 1) {
    for (int r = 0; r < model->rowCount(); ++r) {
        if (model->item(r, 0)->text() == label)
            return model->item(r, column)->toolTip();
    }
    return {};
}

} // namespace shardscope::test
