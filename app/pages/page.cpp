#include "page.h"

#include <QComboBox>

namespace shardscope {

void Page::forwardImportRequests(QComboBox* modelPicker) {
    connect(modelPicker, &QComboBox::activated, this, [this, modelPicker](int i) {
        if (modelPicker->itemData(i).toString() == "hf")
            emit importModelRequested();
    });
}

} // namespace shardscope
