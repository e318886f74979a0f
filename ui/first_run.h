#pragma once

// The first start: what Crowdtrain is (nothing runs until you choose), a
// display name or anonymous, a project (the local demo is always there), a
// preset; Finish sets them on the daemon and joins. GUI thread only.

#include <QWizard>

class QButtonGroup;
class QCheckBox;
class QLineEdit;
class QListWidget;

namespace crowdtrain::ui {

class DaemonLink;

class FirstRunWizard : public QWizard {
    Q_OBJECT

public:
    explicit FirstRunWizard(DaemonLink& link, QWidget* parent = nullptr);
    void accept() override;
    // The error of the last Finish ("" when it joined).
    QString error() const { return m_error; }

    QLineEdit* nameEdit() const { return m_name; }
    QCheckBox* anonymousBox() const { return m_anonymous; }
    QListWidget* projectList() const { return m_projects; }

private:
    void loadProjects();

    DaemonLink& m_link;
    QLineEdit* m_name;
    QCheckBox* m_anonymous;
    QListWidget* m_projects;
    QButtonGroup* m_presets;
    QString m_error;
};

} // namespace crowdtrain::ui
