{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJhYjE4OTJmZTJkMWM4ZTQ4MmQ5YzU3Zjk4ZmMxNWNkMzk5MjgxMjE0YjY1N2Q0YjM0Y2M3NTFjMGZlMzQ2MDgyIn0sIm5hbWUiOiJkZW1vLWdhbW1hLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "LGxkXn+WbvqVyJIAPXhOsaEmi38LH0nLEOZmlECewttdm8th9HvOPQ5Lr00VBB/2MLN5tQdV4gXlgHvDcFIPAg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
