#include "session_document.h"

#include <QUndoCommand>
#include <nlohmann/json.hpp>

namespace shardscope {

// One step of history: the session before and after. Sessions are small (a few kB), and whole
// copies make undo exact whatever the edit touched.
class EditCommand : public QUndoCommand {
public:
    EditCommand(SessionDocument* doc, const QString& text, Session before, Session after,
                int gesture)
        : QUndoCommand(text), doc_(doc), before_(std::move(before)), after_(std::move(after)),
          gesture_(gesture) {}

    void undo() override { doc_->assign(before_); }
    void redo() override { doc_->assign(after_); }
    int id() const override { return gesture_ > 0 ? 1 : -1; }
    bool mergeWith(const QUndoCommand* other) override {
        const auto* o = static_cast<const EditCommand*>(other);
        if (o->gesture_ != gesture_)
            return false;
        after_ = o->after_;
        setText(o->text());
        return true;
    }

private:
    SessionDocument* doc_;
    Session before_, after_;
    int gesture_;
};

SessionDocument::SessionDocument(QObject* parent) : QObject(parent) {
    assign(defaultSession());
    undo_.setClean();
}

void SessionDocument::edit(const QString& description,
                           const std::function<void(Session&)>& change) {
    Session after = session_;
    change(after);
    if (sessionToJson(after) == sessionToJson(session_))
        return; // nothing changed: no empty step in the history
    undo_.push(new EditCommand(this, description, session_, std::move(after), gesture_));
}

void SessionDocument::beginGesture() {
    gesture_ = ++gestureSeq_;
}

void SessionDocument::endGesture() {
    gesture_ = 0;
}

void SessionDocument::reset(const Session& session, const QString& filePath) {
    undo_.clear();
    assign(session);
    undo_.setClean();
    setFilePath(filePath);
}

void SessionDocument::setFilePath(const QString& path) {
    if (path == filePath_)
        return;
    filePath_ = path;
    emit filePathChanged(path);
}

void SessionDocument::assign(const Session& s) {
    session_ = s;
    inputs_ = s.planInputs();
    estimate_ = shardscope::estimate(inputs_);
    emit changed();
}

} // namespace shardscope
