// The open session, its undo history and the estimate of its plan. Pages read from it and change
// it only through edit(), so every change is one undoable step and every view sees the same
// numbers. Lives on the GUI thread; estimating one plan takes microseconds, so it is done here.
#pragma once

#include "session.h"

#include <QObject>
#include <QString>
#include <QUndoStack>
#include <functional>

namespace shardscope {

class SessionDocument : public QObject {
    Q_OBJECT
public:
    explicit SessionDocument(QObject* parent = nullptr);

    const Session& session() const { return session_; }
    const PlanInputs& inputs() const { return inputs_; }
    const Estimate& estimate() const { return estimate_; }

    // Change the session as one undoable step named `description` ("Set tp to 4"). Edits made
    // while a gesture is open (a slider drag) merge into one step.
    void edit(const QString& description, const std::function<void(Session&)>& change);
    void beginGesture();
    void endGesture();

    // Replace the whole session (new / open): clears the undo history.
    void reset(const Session& session, const QString& filePath = {});

    QUndoStack* undoStack() { return &undo_; }
    QString filePath() const { return filePath_; }
    void setFilePath(const QString& path); // after "save as"
    bool isModified() const { return !undo_.isClean(); }
    void markSaved() { undo_.setClean(); }

signals:
    void changed(); // the session (and so the estimate) changed
    void filePathChanged(QString path);

private:
    friend class EditCommand;
    void assign(const Session& s); // set without touching the undo stack

    Session session_;
    PlanInputs inputs_;
    Estimate estimate_;
    QUndoStack undo_;
    QString filePath_;
    int gesture_ = 0; // serial of the open gesture, 0 when none
    int gestureSeq_ = 0;
};

} // namespace shardscope
