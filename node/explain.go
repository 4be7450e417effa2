package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// explain turns a storage refusal into what failed and what to check: which credential the
// service refused, or which container or queue is missing. It never shows a secret. Other
// errors pass unchanged.
func (c *common) explain(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
		return err
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized) {
		return c.credentialError(re)
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return fmt.Errorf("NATS at %s refused the credentials (%s): check --nats-creds, --nats-nkey-file or --nats-user and its password (%s or --nats-password-file)",
			c.natsURL, c.natsAuth.Describe(), envNATSPassword)
	}
	if errors.Is(err, queue.ErrNotFound) {
		return fmt.Errorf("queue %q does not exist in %s: check --queue (env JOBS_QUEUE) and the account; `worker run` and `worker submit` create it", c.queueName, c.account)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, client.ErrNoSuchJob) {
		if missing := c.missingContainer(ctx); missing != nil {
			return missing
		}
	}
	return err
}

// credentialError names the credential the service refused (the status and code say how).
func (c *common) credentialError(re *azcore.ResponseError) error {
	code := fmt.Sprintf("HTTP %d %s", re.StatusCode, re.ErrorCode)
	switch c.account.Auth() {
	case store.AuthConnectionString:
		return fmt.Errorf("storage refused the connection string's credentials for %s (%s): check AccountName and AccountKey (or its SAS) in --azure-connection-string / AZURE_STORAGE_CONNECTION_STRING", c.account, code)
	case store.AuthSAS:
		return fmt.Errorf("storage refused the SAS token for %s (%s): check that it has not expired and grants blob (container and object) and queue access (--storage-sas-file or %s)", c.account, code, envSASToken)
	default:
		if re.ErrorCode == string(bloberror.AuthorizationPermissionMismatch) || re.ErrorCode == string(bloberror.AuthorizationFailure) {
			return fmt.Errorf("storage refused the Entra ID identity for %s (%s): grant it Storage Blob Data Contributor and Storage Queue Data Contributor on the account (or on the containers and queue)", c.account, code)
		}
		return fmt.Errorf("storage refused the Entra ID token for %s (%s): check the identity (managed or workload identity, `az login`) and its tenant", c.account, code)
	}
}

// missingContainer names the jobs container when it does not exist (nil when it does, or when
// that cannot be told).
func (c *common) missingContainer(ctx context.Context) error {
	bc, err := c.blob()
	if err != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err = bc.ServiceClient().NewContainerClient(c.jobsContainer).GetProperties(cctx, nil)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return fmt.Errorf("container %q does not exist in %s: check --jobs-container (env JOBS_CONTAINER) and the account; `worker run` and `worker submit` create it", c.jobsContainer, c.account)
	}
	return nil
}
